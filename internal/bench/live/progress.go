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

package live

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ProgressMode says how a run reports progress on stderr.
type ProgressMode string

const (
	// ProgressAuto is a bar on a terminal and lines otherwise.
	ProgressAuto ProgressMode = "auto"
	// ProgressBar redraws one line with a carriage return.
	ProgressBar ProgressMode = "bar"
	// ProgressLines prints one line every few seconds, for logs and CI.
	ProgressLines ProgressMode = "lines"
	// ProgressNone prints nothing.
	ProgressNone ProgressMode = "none"
)

// ParseProgressMode reads the --progress flag.
func ParseProgressMode(s string) (ProgressMode, error) {
	switch m := ProgressMode(s); m {
	case ProgressAuto, ProgressBar, ProgressLines, ProgressNone:
		return m, nil
	}
	return "", fmt.Errorf("progress %q: want auto, bar, lines or none", s)
}

// Progress counts a run's requests and reports them while it runs. Its methods are safe for
// concurrent use; a nil *Progress does nothing.
type Progress struct {
	w        io.Writer
	bar      bool
	every    time.Duration
	total    int
	start    time.Time
	sent     atomic.Int64
	done     atomic.Int64
	failed   atomic.Int64
	inFlight atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex // one writer at a time
	width    int        // of the last bar drawn, to blank its tail
}

// NewProgress reports on w in mode (auto: a bar when tty, lines otherwise); every is the period of
// lines (a bar is redrawn four times a second). It returns nil for ProgressNone.
func NewProgress(w io.Writer, mode ProgressMode, tty bool, every time.Duration) *Progress {
	if mode == ProgressAuto {
		mode = ProgressLines
		if tty {
			mode = ProgressBar
		}
	}
	if mode == ProgressNone || w == nil {
		return nil
	}
	if every <= 0 {
		every = 5 * time.Second
	}
	p := &Progress{w: w, bar: mode == ProgressBar, every: every}
	if p.bar {
		p.every = 250 * time.Millisecond
	}
	return p
}

// begin starts the periodic report for a run of total requests.
func (p *Progress) begin(total int) {
	if p == nil {
		return
	}
	p.total, p.start, p.stop = total, time.Now(), make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.print(false)
			}
		}
	}()
}

// end stops the report and prints the final state.
func (p *Progress) end() {
	if p == nil || p.stop == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	p.print(true)
}

func (p *Progress) sentOne() {
	if p != nil {
		p.sent.Add(1)
		p.inFlight.Add(1)
	}
}

func (p *Progress) finished(failed bool) {
	if p == nil {
		return
	}
	p.inFlight.Add(-1)
	p.done.Add(1)
	if failed {
		p.failed.Add(1)
	}
}

// skipped counts a request that was never sent (its earlier turn failed, or the run ran out of
// time) as done and failed.
func (p *Progress) skipped() {
	if p != nil {
		p.done.Add(1)
		p.failed.Add(1)
	}
}

// Line is the current state in one line, without a terminator.
func (p *Progress) Line() string {
	el := time.Since(p.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(p.sent.Load()) / el
	}
	return fmt.Sprintf("%d/%d done, %d in flight, %d failed, %.1fs elapsed (wall), %.1f req/s sent (wall)",
		p.done.Load(), p.total, p.inFlight.Load(), p.failed.Load(), el, rate)
}

func (p *Progress) print(final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := p.Line()
	if !p.bar {
		fmt.Fprintf(p.w, "kvbench live: %s\n", line)
		return
	}
	const cells = 30
	filled := 0
	if p.total > 0 {
		filled = int(float64(cells) * float64(p.done.Load()) / float64(p.total))
	}
	filled = min(max(filled, 0), cells)
	s := "[" + strings.Repeat("#", filled) + strings.Repeat(".", cells-filled) + "] " + line
	pad := max(p.width-len(s), 0)
	p.width = len(s)
	fmt.Fprintf(p.w, "\r%s%s", s, strings.Repeat(" ", pad))
	if final {
		fmt.Fprintln(p.w)
	}
}
