package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/controller"
	"github.com/kvrouter/kvrouter/internal/render"
)

func TestParseFlagsDefaults(t *testing.T) {
	t.Setenv("KVROUTER_IMAGE", "")
	c, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.metricsAddr != ":8080" || c.probeAddr != ":8081" || c.leaderElect {
		t.Errorf("defaults = %+v", c)
	}
	if c.image != render.DefaultImage {
		t.Errorf("image = %q, want %q", c.image, render.DefaultImage)
	}
	if c.labelAllowList != nil {
		t.Errorf("label allow-list = %#v, want nil (render's default)", c.labelAllowList)
	}
	if c.recheckInterval != controller.DefaultRecheckInterval {
		t.Errorf("recheck = %s", c.recheckInterval)
	}
}

func TestParseFlags(t *testing.T) {
	t.Setenv("KVROUTER_IMAGE", "registry.example.com/kvrouter:env")
	c, err := parseFlags([]string{
		"--leader-elect", "--metrics-bind-address=0", "--watch-namespaces", "a, b,,c",
		"--label-allow-list", "team,app.kubernetes.io/part-of", "--crd-recheck-interval", "5s", "--zap-log-level", "debug",
	}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.leaderElect || c.metricsAddr != "0" || c.recheckInterval != 5*time.Second {
		t.Errorf("parsed = %+v", c)
	}
	if c.image != "registry.example.com/kvrouter:env" {
		t.Errorf("image = %q, want $KVROUTER_IMAGE", c.image)
	}
	if !slices.Equal(c.watchNamespaces, []string{"a", "b", "c"}) {
		t.Errorf("namespaces = %q", c.watchNamespaces)
	}
	if !slices.Equal(c.labelAllowList, []string{"team", "app.kubernetes.io/part-of"}) {
		t.Errorf("allow-list = %q", c.labelAllowList)
	}

	c, err = parseFlags([]string{"--label-allow-list", "-"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.labelAllowList == nil || len(c.labelAllowList) != 0 {
		t.Errorf(`--label-allow-list - = %#v, want an empty, non-nil list (copy nothing)`, c.labelAllowList)
	}
}

func TestRunRefusesBadCommandLines(t *testing.T) {
	for _, args := range [][]string{
		{"--no-such-flag"},
		{"stray-argument"},
		{"--crd-recheck-interval", "0s"},
		{"render"}, // render without -f
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("run(%q) = %d, want 2; stderr: %s", args, code, stderr.String())
		}
		if stderr.Len() == 0 {
			t.Errorf("run(%q) explained nothing on stderr", args)
		}
	}
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--help = %d", code)
	}
	for _, want := range []string{"manager render -f FILE", "-kvrouter-image", "-leader-elect", "-watch-namespaces"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, stderr.String())
		}
	}
}

// The manager and `manager render` take the image under the same documented name, and both
// still accept --image.
func TestImageFlagNames(t *testing.T) {
	for _, name := range []string{"--kvrouter-image", "--image"} {
		c, err := parseFlags([]string{name, "registry.example.com/kvrouter:" + name[2:]}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if c.image != "registry.example.com/kvrouter:"+name[2:] {
			t.Errorf("manager %s: image = %q", name, c.image)
		}
		var out, errOut bytes.Buffer
		if rc := runRender([]string{"-f", "../../config/samples/kvrouter_simulate.yaml", name, "r.example.com/k:" + name[2:]}, &out, &errOut); rc != 0 {
			t.Fatalf("manager render %s: exit %d: %s", name, rc, errOut.String())
		}
		if !strings.Contains(out.String(), "image: r.example.com/k:"+name[2:]) {
			t.Errorf("manager render %s: the image is not in the output", name)
		}
	}
}
