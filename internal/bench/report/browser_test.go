/*
Copyright 2026 The kvrouter Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package report

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// findBrowser returns a Chromium or Chrome binary: $KVROUTER_BROWSER, else the first on PATH.
func findBrowser() (string, error) {
	if p := os.Getenv("KVROUTER_BROWSER"); p != "" {
		return exec.LookPath(p)
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium, chromium-browser, google-chrome or chrome on PATH (set KVROUTER_BROWSER to a binary)")
}

// pageCharts is what the browser reports about the rendered charts.
type pageCharts struct {
	SVGs int `json:"svgs"`
	// CDFLines holds, per line of the TTFT distribution, how many vertices the browser parsed
	// (SVG points, not text), and CDFWidth the rendered width of each line.
	CDFLines []int     `json:"cdfLines"`
	CDFWidth []float64 `json:"cdfWidth"`
	// TimelineRuns holds, per run panel of the timeline, how many request segments it draws.
	TimelineRuns []int   `json:"timelineRuns"`
	TimelineH    float64 `json:"timelineHeight"`
}

const chartsProbe = `(() => {
	const cdf = document.querySelector('svg[data-chart="ttft-cdf"]');
	const tl = document.querySelector('svg[data-chart="timeline"]');
	const lines = cdf ? [...cdf.querySelectorAll('polyline[data-points]')] : [];
	return {
		svgs: document.querySelectorAll('svg').length,
		cdfLines: lines.map(p => p.points.numberOfItems),
		cdfWidth: lines.map(p => p.getBBox().width),
		timelineRuns: tl ? [...tl.querySelectorAll('g[data-policy]')].map(g => g.querySelectorAll('line').length) : [],
		timelineHeight: tl ? tl.getBoundingClientRect().height : 0,
	};
})()`

// TestReportInBrowser opens a generated report.html in headless Chromium and checks that the
// request charts are drawn with data and that the page logs no errors. It skips when no
// browser is installed, except in CI (CI set, as CI=true), where a missing browser fails it.
func TestReportInBrowser(t *testing.T) {
	browser, err := findBrowser()
	if err != nil {
		if ci := os.Getenv("CI"); ci != "" {
			t.Fatalf("CI=%s and %v: .ci/run installs Debian's chromium", ci, err)
		}
		t.Skipf("skipping the browser test: %v", err)
	}
	dir := t.TempDir()
	r := liveSample(400)
	if err := WriteFiles(dir, r); err != nil {
		t.Fatal(err)
	}

	// Serve the report on loopback and note every other path the page asks for: a
	// self-contained report asks for none.
	var mu sync.Mutex
	var extra []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/report.html":
			http.ServeFile(w, req, filepath.Join(dir, "report.html"))
		case "/favicon.ico":
			w.WriteHeader(http.StatusNoContent)
		default:
			mu.Lock()
			extra = append(extra, req.URL.Path)
			mu.Unlock()
			http.NotFound(w, req)
		}
	}))
	defer srv.Close()

	profile := filepath.Join(t.TempDir(), "chromium-profile")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1024))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancelBrowser() // closes the browser and waits for it
			cancelAlloc()
		}
	}
	defer stop()

	// Listen starts the browser and its tab; events of the page load arrive after it returns.
	var problems []string
	err = chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg := e.ExceptionDetails.Text
			if ex := e.ExceptionDetails.Exception; ex != nil {
				msg += " " + ex.Description
			}
			problems = append(problems, "script error: "+msg)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value))
				}
				problems = append(problems, "console."+string(e.Type)+": "+strings.Join(args, " "))
			}
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
				problems = append(problems, "browser log "+string(e.Entry.Level)+": "+e.Entry.Text+" "+e.Entry.URL)
			}
		}
	})
	if err != nil {
		t.Fatalf("starting the browser (%s): %v", browser, err)
	}

	err = chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/report.html"),
		chromedp.WaitVisible(chromedp.CSS(`svg[data-chart="timeline"]`)))
	if err != nil {
		t.Fatalf("browser (%s): %v", browser, err)
	}
	charts, err := chromedp.Run(bctx, chromedp.Evaluate[pageCharts](chartsProbe))
	if err != nil {
		t.Fatalf("reading the charts: %v", err)
	}
	if shot := os.Getenv("KVROUTER_REPORT_SCREENSHOT"); shot != "" { // a PNG path, to look at the page
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pid := 0
	if c := chromedp.FromContext(bctx); c != nil && c.Browser != nil && c.Browser.Process() != nil {
		pid = c.Browser.Process().Pid
	}
	// Let late console messages arrive before judging.
	time.Sleep(200 * time.Millisecond)

	if charts.SVGs != 5 {
		t.Errorf("%d SVG charts rendered, want 5 (curve, two bars, TTFT distribution, timeline)", charts.SVGs)
	}
	if len(charts.CDFLines) != len(r.Requests) {
		t.Errorf("TTFT distribution has %d lines, want one per run (%d)", len(charts.CDFLines), len(r.Requests))
	}
	for i, n := range charts.CDFLines {
		// A step line has two vertices per point plus its start.
		if n != 2*cdfPoints+1 || !(charts.CDFWidth[i] > 0) {
			t.Errorf("TTFT line %d: %d vertices over %g px, want %d over a positive width", i, n, charts.CDFWidth[i], 2*cdfPoints+1)
		}
	}
	if len(charts.TimelineRuns) != len(r.Requests) || !(charts.TimelineH > 0) {
		t.Errorf("timeline: panels %v, height %g; want one panel per run", charts.TimelineRuns, charts.TimelineH)
	}
	for i, n := range charts.TimelineRuns {
		// Every sampled request draws at least one segment.
		if n < timelineRows {
			t.Errorf("timeline panel %d draws %d segments for %d sampled requests", i, n, timelineRows)
		}
	}
	mu.Lock()
	if len(problems) > 0 {
		t.Errorf("the page logged errors:\n%s", strings.Join(problems, "\n"))
	}
	if len(extra) > 0 {
		t.Errorf("report.html loaded more than itself: %v", extra)
	}
	mu.Unlock()

	stop()
	if pid > 0 {
		assertGone(t, pid, profile)
	}
}

// assertGone fails when the browser process, or any process started with the test's profile
// directory, is still running after the browser was closed.
func assertGone(t *testing.T, pid int, profile string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := processesUsing(profile)
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			left = append(left, pid)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("browser processes still running after the test closed the browser: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesUsing lists the processes whose command line mentions dir (Linux; none elsewhere).
func processesUsing(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), dir) {
			// A zombie has exited; only its parent has not collected it yet.
			if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
				if i := strings.LastIndexByte(string(st), ')'); i > 0 && strings.HasPrefix(string(st[i:]), ") Z") {
					continue
				}
			}
			out = append(out, pid)
		}
	}
	return out
}
