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

package discovery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

const twoEngines = `endpoints:
  - name: e1
    url: http://127.0.0.1:8002/
  - name: e0
    url: http://127.0.0.1:8001
    kvEvents: tcp://127.0.0.1:5557
    kvReplay: tcp://127.0.0.1:5558
`

func TestParseFile(t *testing.T) {
	eps, err := ParseFile([]byte(twoEngines))
	if err != nil {
		t.Fatal(err)
	}
	want := []Endpoint{
		{Name: "e0", URL: "http://127.0.0.1:8001", KVEvents: "tcp://127.0.0.1:5557", KVReplay: "tcp://127.0.0.1:5558", Ready: true},
		{Name: "e1", URL: "http://127.0.0.1:8002", Ready: true},
	}
	if !equal(eps, want) {
		t.Fatalf("got %+v\nwant %+v", eps, want)
	}
	bad := map[string]string{
		"typo":      "endpoints:\n  - name: e0\n    url: http://x:1\n    kvevent: tcp://x:2\n",
		"no name":   "endpoints:\n  - url: http://x:1\n",
		"bad url":   "endpoints:\n  - name: e0\n    url: x:1\n",
		"bad zmq":   "endpoints:\n  - name: e0\n    url: http://x:1\n    kvEvents: http://x:2\n",
		"duplicate": "endpoints:\n  - name: e0\n    url: http://x:1\n  - name: e0\n    url: http://x:2\n",
		"not yaml":  "endpoints: [",
	}
	for name, doc := range bad {
		if _, err := ParseFile([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// collector records update calls.
type collector struct {
	mu   sync.Mutex
	last []Endpoint
	n    int
	ch   chan struct{}
}

func newCollector() *collector { return &collector{ch: make(chan struct{}, 100)} }

func (c *collector) update(eps []Endpoint) {
	c.mu.Lock()
	c.last = append([]Endpoint(nil), eps...)
	c.n++
	c.mu.Unlock()
	c.ch <- struct{}{}
}

// wait waits until there has been an update and the latest list satisfies ok.
func (c *collector) wait(t *testing.T, what string, ok func([]Endpoint) bool) []Endpoint {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		last, n := c.last, c.n
		c.mu.Unlock()
		if n > 0 && ok(last) {
			return last
		}
		select {
		case <-c.ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; last list %+v", what, last)
		}
	}
}

func names(eps []Endpoint) string {
	var s []string
	for _, e := range eps {
		n := e.Name
		if !e.Ready {
			n += "(unready)"
		}
		s = append(s, n)
	}
	return strings.Join(s, ",")
}

func TestFileWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(path, []byte(twoEngines), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCollector()
	done := make(chan error, 1)
	go func() {
		done <- (&File{Path: path, Log: logr.Discard(), Debounce: 20 * time.Millisecond}).Run(ctx, c.update)
	}()
	c.wait(t, "initial list", func(e []Endpoint) bool { return names(e) == "e0,e1" })

	// An edit in place.
	if err := os.WriteFile(path, []byte("endpoints:\n  - name: e2\n    url: http://127.0.0.1:8003\n    ready: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.wait(t, "edited list", func(e []Endpoint) bool { return names(e) == "e2(unready)" })

	// A broken file keeps the last good list.
	if err := os.WriteFile(path, []byte("endpoints: ["), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	// An atomic replace (write elsewhere, rename over).
	tmp := filepath.Join(dir, ".new")
	if err := os.WriteFile(tmp, []byte(twoEngines), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	got := c.wait(t, "renamed list", func(e []Endpoint) bool { return names(e) == "e0,e1" })
	if got[0].KVEvents == "" {
		t.Fatal("kvEvents lost on reload")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	// A missing file fails at start.
	if err := (&File{Path: filepath.Join(dir, "nope.yaml")}).Run(context.Background(), c.update); err == nil {
		t.Fatal("missing file accepted")
	}
}

func enginePod(name, ip string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{
			"app.kubernetes.io/component": "engine", "serving.kvrouter.dev/kvrouter": "r1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "x", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8000}, {Name: "kv-events", ContainerPort: 5557}, {Name: "kv-replay", ContainerPort: 5558}}}}},
		Status: corev1.PodStatus{PodIP: ip, Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// runKubernetesScenario drives pods through add, ready, other-router, delete and checks the
// endpoint list; it runs against a fake clientset and, in the envtest test, a real API server.
// Discovery reads through watcher; the scenario writes pods through cs.
func runKubernetesScenario(t *testing.T, watcher, cs kubernetes.Interface) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sel := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/component": "engine", "serving.kvrouter.dev/kvrouter": "r1"})
	k := &Kubernetes{Client: watcher, Namespace: "ns", Selector: sel, HTTPPort: 9999, Log: logr.Discard(), Debounce: 20 * time.Millisecond}
	c := newCollector()
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx, c.update) }()
	c.wait(t, "empty initial list", func(e []Endpoint) bool { return len(e) == 0 })

	create := func(p *corev1.Pod) {
		t.Helper()
		st := p.Status
		created, err := cs.CoreV1().Pods("ns").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = st
		if _, err := cs.CoreV1().Pods("ns").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(enginePod("engine-a", "10.0.0.1", true))
	create(enginePod("engine-b", "10.0.0.2", false))
	other := enginePod("engine-other", "10.0.0.3", true)
	other.Labels["serving.kvrouter.dev/kvrouter"] = "r2"
	create(other)
	noIP := enginePod("engine-c", "", false)
	create(noIP)

	got := c.wait(t, "two pods", func(e []Endpoint) bool { return names(e) == "engine-a,engine-b(unready)" })
	if got[0].URL != "http://10.0.0.1:8000" || got[0].KVEvents != "tcp://10.0.0.1:5557" || got[0].KVReplay != "tcp://10.0.0.1:5558" {
		t.Fatalf("engine-a %+v", got[0])
	}
	// engine-b becomes ready.
	b, err := cs.CoreV1().Pods("ns").Get(ctx, "engine-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Status.Conditions[0].Status = corev1.ConditionTrue
	if _, err := cs.CoreV1().Pods("ns").UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.wait(t, "engine-b ready", func(e []Endpoint) bool { return names(e) == "engine-a,engine-b" })
	// engine-a goes away.
	if err := cs.CoreV1().Pods("ns").Delete(ctx, "engine-a", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	c.wait(t, "engine-a removed", func(e []Endpoint) bool { return names(e) == "engine-b" })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
}

func TestKubernetesFakeClient(t *testing.T) {
	cs := fake.NewClientset()
	runKubernetesScenario(t, cs, cs)
}

func TestKubernetesNoIPNoPortFallback(t *testing.T) {
	k := &Kubernetes{HTTPPort: 8000}
	p := enginePod("x", "10.1.2.3", true)
	p.Spec.Containers[0].Ports = nil
	eps := k.endpoints(p)
	if len(eps) != 1 || eps[0].URL != "http://10.1.2.3:8000" || eps[0].KVEvents != "" {
		t.Fatalf("fallback port: %+v", eps)
	}
	now := metav1.Now()
	p.DeletionTimestamp = &now
	if eps := k.endpoints(p); len(eps) != 1 || eps[0].Ready {
		t.Fatalf("terminating pod: %+v", eps)
	}
	p.Status.PodIP = ""
	if eps := k.endpoints(p); len(eps) != 0 {
		t.Fatalf("pod without IP became an endpoint: %+v", eps)
	}
	if eps := (&Kubernetes{}).endpoints(enginePod("y", "10.1.2.4", true)); len(eps) != 1 || eps[0].URL != "http://10.1.2.4:8000" {
		t.Fatalf("named http port: %+v", eps)
	}
	noPort := enginePod("z", "10.1.2.5", true)
	noPort.Spec.Containers[0].Ports = nil
	if eps := (&Kubernetes{}).endpoints(noPort); len(eps) != 0 {
		t.Fatalf("pod without an HTTP port became an endpoint: %+v", eps)
	}
}

func TestKubernetesTargetPorts(t *testing.T) {
	p := enginePod("e", "10.1.2.3", true)
	// One target port: named after the pod, the pool's port wins over the named http port.
	k := &Kubernetes{TargetPorts: []int{8100}, DPRanks: 2}
	want := []Endpoint{{Name: "e", URL: "http://10.1.2.3:8100", KVEvents: "tcp://10.1.2.3:5557",
		KVReplay: "tcp://10.1.2.3:5558", DPRanks: 2, Ready: true}}
	if got := k.endpoints(p); !equal(got, want) {
		t.Fatalf("one port:\n got %+v\nwant %+v", got, want)
	}
	// Several: one engine per port, event ports offset by the port's index (rank).
	k = &Kubernetes{TargetPorts: []int{8000, 8001, 8002}, EventsPort: 6000, ReplayPort: 7000}
	want = []Endpoint{
		{Name: "e:8000", URL: "http://10.1.2.3:8000", KVEvents: "tcp://10.1.2.3:5557", KVReplay: "tcp://10.1.2.3:5558", Ready: true},
		{Name: "e:8001", URL: "http://10.1.2.3:8001", KVEvents: "tcp://10.1.2.3:5558", KVReplay: "tcp://10.1.2.3:5559", Ready: true},
		{Name: "e:8002", URL: "http://10.1.2.3:8002", KVEvents: "tcp://10.1.2.3:5559", KVReplay: "tcp://10.1.2.3:5560", Ready: true},
	}
	if got := k.endpoints(p); !equal(got, want) {
		t.Fatalf("three ports:\n got %+v\nwant %+v", got, want)
	}
	// Defaults when the pod names no event ports; none at all without defaults.
	p.Spec.Containers[0].Ports = nil
	got := k.endpoints(p)
	if len(got) != 3 || got[1].KVEvents != "tcp://10.1.2.3:6001" || got[2].KVReplay != "tcp://10.1.2.3:7002" {
		t.Fatalf("default event ports: %+v", got)
	}
	k.EventsPort, k.ReplayPort = 0, 0
	if got := k.endpoints(p); len(got) != 3 || got[0].KVEvents != "" || got[2].KVReplay != "" {
		t.Fatalf("no event ports: %+v", got)
	}
}
