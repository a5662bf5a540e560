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

// Package images checks the Dockerfile without a container engine: what each image holds and
// runs as, that its entrypoints are the commands the operator gives its pods, and that the
// binaries its build stage makes are static.
package images

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

const repoRoot = "../.."

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, args string
}

type stage struct {
	name, from string
	body       []instruction
}

func parseDockerfile(t *testing.T) []stage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return parseStages(t, string(b))
}

func parseStages(t *testing.T, dockerfile string) []stage {
	t.Helper()
	var stages []stage
	var pending string
	sc := bufio.NewScanner(strings.NewReader(dockerfile))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if pending == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, pending = pending+line, ""
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			fields := strings.Fields(in.args)
			fields = slices.DeleteFunc(fields, func(s string) bool { return strings.HasPrefix(s, "--platform") })
			s := stage{from: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				s.name = fields[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			continue // ARG before the first FROM
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

// The image of each binary the operator runs or deploys: named after its kustomize image name
// in config/manager.
var binaries = []string{"manager", "router", "vllm-sim"}

// Each runtime image is distroless/static:nonroot with its one binary copied from the build
// stage, a numeric non-root USER (the kubelet checks runAsNonRoot against it; OpenShift replaces
// it), and an exec-form ENTRYPOINT: no RUN, no shell, nothing that needs one at run time. A plain
// `docker build .` gives the manager.
func TestRuntimeStages(t *testing.T) {
	for _, p := range runtimeStageProblems(parseDockerfile(t)) {
		t.Error(p)
	}
}

// The check above sees what it is for.
func TestRuntimeStageProblemsCatchesRegressions(t *testing.T) {
	bad := parseStages(t, `FROM golang:1.26 AS build
RUN go build -o /out/ ./cmd/...
FROM debian:bookworm AS manager
RUN apt-get update
COPY --from=build /out/ /
USER nonroot
ENTRYPOINT /manager
FROM gcr.io/distroless/static:nonroot AS router
COPY --from=build /out/router /router
USER 0
ENTRYPOINT ["/router"]
`)
	got := strings.Join(runtimeStageProblems(bad), "\n")
	for _, want := range []string{"stage manager is FROM debian", "manager runs RUN", "manager copies", "manager USER \"nonroot\"",
		"manager ENTRYPOINT /manager", "router USER \"0\"", "no stage \"vllm-sim\"", "last stage"} {
		if !strings.Contains(got, want) {
			t.Errorf("no problem mentions %q; problems:\n%s", want, got)
		}
	}
}

func runtimeStageProblems(stages []stage) []string {
	var out []string
	byName := map[string]stage{}
	for _, s := range stages {
		byName[s.name] = s
	}
	for _, bin := range binaries {
		s, ok := byName[bin]
		if !ok {
			out = append(out, fmt.Sprintf("no stage %q", bin))
			continue
		}
		if !strings.HasPrefix(s.from, "gcr.io/distroless/static:nonroot") && !strings.HasPrefix(s.from, "gcr.io/distroless/static@sha256:") {
			out = append(out, fmt.Sprintf("stage %s is FROM %s, want gcr.io/distroless/static:nonroot", bin, s.from))
		}
		var user, entrypoint string
		var copies []string
		for _, in := range s.body {
			switch in.cmd {
			case "COPY":
				copies = append(copies, in.args)
			case "USER":
				user = in.args
			case "ENTRYPOINT":
				entrypoint = in.args
			case "LABEL", "ENV", "EXPOSE", "ARG":
			default:
				out = append(out, fmt.Sprintf("stage %s runs %s %s: a runtime stage only copies the binary", bin, in.cmd, in.args))
			}
		}
		if want := []string{"--from=build /out/" + bin + " /" + bin}; !slices.Equal(copies, want) {
			out = append(out, fmt.Sprintf("stage %s copies %q, want %q", bin, copies, want))
		}
		uid, gid, _ := strings.Cut(user, ":")
		if n, err := strconv.Atoi(uid); err != nil || n == 0 {
			out = append(out, fmt.Sprintf("stage %s USER %q: want a numeric non-root UID", bin, user))
		}
		if gid != "" {
			if _, err := strconv.Atoi(gid); err != nil {
				out = append(out, fmt.Sprintf("stage %s USER %q: want a numeric GID", bin, user))
			}
		}
		var ep []string
		if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || !slices.Equal(ep, []string{"/" + bin}) {
			out = append(out, fmt.Sprintf("stage %s ENTRYPOINT %s, want the exec form [\"/%s\"]", bin, entrypoint, bin))
		}
	}
	if len(stages) == 0 || stages[len(stages)-1].name != "manager" {
		out = append(out, "the last stage (what `docker build .` gives) is not manager")
	}
	return out
}

// The paths the operator runs in its pods are the ones the images hold, and the images it
// names by default are the kustomize image names the stages are built for.
func TestPodCommandsMatchTheImages(t *testing.T) {
	kvr := wrappers.MakeKVRouter("sim", "ns").Simulate().Obj()
	objs, err := render.Objects(kvr, render.Options{RouterImage: "router", SimulatorImage: "vllm-sim"})
	if err != nil {
		t.Fatal(err)
	}
	commands := map[string][]string{}
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			for _, c := range d.Spec.Template.Spec.Containers {
				commands[c.Image] = c.Command
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			commands[c.Image] = c.Command
		}
	}
	for _, bin := range binaries {
		if got := commands[bin]; !slices.Equal(got, []string{"/" + bin}) {
			t.Errorf("the pod of image %s runs %q, want [/%s] (its ENTRYPOINT)", bin, got, bin)
		}
	}

	kust, err := os.ReadFile(filepath.Join(repoRoot, "config", "manager", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal(kust, &k); err != nil {
		t.Fatal(err)
	}
	release := map[string]string{}
	var names []string
	for _, im := range k.Images {
		release[im.Name] = im.NewName + ":" + im.NewTag
		if im.Name == "vllm" {
			continue // the engines' image (RELATED_IMAGE_ENGINE), not built here
		}
		names = append(names, im.Name)
	}
	if !slices.Equal(names, binaries) {
		t.Errorf("config/manager names images %v, want the Dockerfile's stages %v", names, binaries)
	}
	if release["vllm"] != render.DefaultEngineImage {
		t.Errorf("config/manager's vllm image %s; render defaults to %s", release["vllm"], render.DefaultEngineImage)
	}
	delete(release, "vllm")
	// `manager render` and local runs fall back to the same release images.
	if release["router"] != render.DefaultRouterImage || release["vllm-sim"] != render.DefaultSimulatorImage {
		t.Errorf("config/manager releases %v; render defaults to %s and %s", release, render.DefaultRouterImage, render.DefaultSimulatorImage)
	}
	// So does `make docker-build`, which tags the images.
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	tagged := map[string]string{}
	for _, line := range strings.Split(string(mk), "\n") {
		if rest, ok := strings.CutPrefix(line, "RELEASE_IMAGES :="); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				tagged[k] = v
			}
		}
	}
	if !maps.Equal(tagged, release) {
		t.Errorf("the Makefile's RELEASE_IMAGES %v differ from config/manager's %v", tagged, release)
	}
}

// buildCommand is the build stage's `go build` line: its leading VAR=value assignments and the
// go command's arguments.
func buildCommand(t *testing.T) (env, args []string) {
	t.Helper()
	for _, s := range parseDockerfile(t) {
		if s.name != "build" {
			continue
		}
		for _, in := range s.body {
			if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
				continue
			}
			words := shellWords(in.args)
			for len(words) > 0 && strings.Contains(words[0], "=") {
				env = append(env, words[0])
				words = words[1:]
			}
			if len(words) < 2 || words[0] != "go" || words[1] != "build" {
				t.Fatalf("build line %q: want VAR=value... go build ...", in.args)
			}
			return env, words[1:]
		}
	}
	t.Fatal("no go build in the Dockerfile's build stage")
	return nil, nil
}

// shellWords splits a simple shell line: whitespace-separated words, double quotes grouping.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// The build line makes static binaries of the three commands: CGO_ENABLED=0 (Go then links
// internally and statically), no libzmq tag, no external linking. distroless/static has no libc,
// so a dynamic binary would not start.
func TestBuildLineIsStatic(t *testing.T) {
	env, args := buildCommand(t)
	if !slices.Contains(env, "CGO_ENABLED=0") {
		t.Errorf("the build line sets %v, not CGO_ENABLED=0", env)
	}
	for i, a := range args {
		if strings.Contains(a, "libzmq") || strings.Contains(a, "linkmode") || a == "-tags" && i+1 < len(args) && strings.Contains(args[i+1], "libzmq") {
			t.Errorf("the build line passes %q", a)
		}
	}
	for _, bin := range binaries {
		if !slices.Contains(args, "./cmd/"+bin) {
			t.Errorf("the build line does not build ./cmd/%s", bin)
		}
	}
}

// The Dockerfile's own build line, run here, makes static executables: no ELF interpreter, no
// shared libraries, CGO_ENABLED=0 and no libzmq tag in their build info. It is a cold build of
// the three binaries (nothing else builds with these flags: about 4 CPU-minutes), so it runs
// only with KVROUTER_STATIC_BUILD=1: `make image-check`.
func TestBuildLineMakesStaticBinaries(t *testing.T) {
	if os.Getenv("KVROUTER_STATIC_BUILD") != "1" {
		t.Skip("a cold build of three binaries: run with KVROUTER_STATIC_BUILD=1 (make image-check)")
	}
	env, args := buildCommand(t)
	out := t.TempDir()
	var goArgs []string
	for i := 0; i < len(args); i++ {
		if args[i] == "-o" && i+1 < len(args) {
			goArgs = append(goArgs, "-o", out+"/")
			i++
			continue
		}
		goArgs = append(goArgs, args[i])
	}
	cmd := exec.Command("go", goArgs...)
	cmd.Dir = repoRoot
	// The Dockerfile's assignments over this environment, without a CGO_ENABLED of its own: a
	// build line that stopped setting CGO_ENABLED=0 would link against libc here (gcc is present)
	// and fail below.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CGO_ENABLED=") })
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch v {
		case "$TARGETOS":
			v = runtime.GOOS
		case "$TARGETARCH":
			v = runtime.GOARCH
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(goArgs, " "), err, b)
	}
	for _, bin := range binaries {
		path := filepath.Join(out, bin)
		f, err := elf.Open(path)
		if err != nil {
			t.Errorf("%s: %v", bin, err)
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has an ELF interpreter: it is dynamically linked", bin)
			}
		}
		if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v (%v)", bin, libs, err)
		}
		f.Close()
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v", bin, err)
			continue
		}
		for _, s := range info.Settings {
			if s.Key == "CGO_ENABLED" && s.Value != "0" || s.Key == "-tags" && strings.Contains(s.Value, "libzmq") {
				t.Errorf("%s was built with %s=%s", bin, s.Key, s.Value)
			}
		}
	}
}

// No package of the three binaries but the standard library's uses cgo in a default build, so
// CGO_ENABLED=0 drops nothing they need: the libzmq transport of the KV-event subscriber is the
// one cgo package, and only the libzmq build tag brings it in.
func TestOnlyTheLibzmqTagBringsCgo(t *testing.T) {
	cgoPackages := func(tags string) []string {
		args := []string{"list", "-deps", "-f", "{{if and .CgoFiles (not .Standard)}}{{.ImportPath}}{{end}}"}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		args = append(args, "./cmd/manager", "./cmd/router", "./cmd/vllm-sim")
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return strings.Fields(string(b))
	}
	if pkgs := cgoPackages(""); len(pkgs) > 0 {
		t.Errorf("non-standard packages with cgo in the default build: %v (a CGO_ENABLED=0 image build leaves them out or fails)", pkgs)
	}
	if pkgs := cgoPackages("libzmq"); !slices.Contains(pkgs, "github.com/pebbe/zmq4") {
		t.Errorf("with -tags libzmq the cgo packages are %v; the check above would not see cgo", pkgs)
	}
}
