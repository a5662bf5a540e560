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
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	poolclient "sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned"
	poolfake "sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned/fake"
)

func inferencePool(name, role string, ports ...int32) *inferencev1.InferencePool {
	p := &inferencev1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: inferencev1.InferencePoolSpec{
			Selector: inferencev1.LabelSelector{MatchLabels: map[inferencev1.LabelKey]inferencev1.LabelValue{"pool-role": inferencev1.LabelValue(role)}},
			EndpointPickerRef: &inferencev1.EndpointPickerRef{Kind: "Service", Name: "epp",
				Port: &inferencev1.Port{Number: 9002}},
		},
	}
	for _, n := range ports {
		p.Spec.TargetPorts = append(p.Spec.TargetPorts, inferencev1.Port{Number: inferencev1.PortNumber(n)})
	}
	return p
}

func rolePod(name, ip, role string, ready bool) *corev1.Pod {
	p := enginePod(name, ip, ready)
	p.Labels = map[string]string{"pool-role": role}
	return p
}

// history records every list a source publishes, on top of a collector.
type history struct {
	*collector
	mu    sync.Mutex
	lists [][]Endpoint
}

func (h *history) update(eps []Endpoint) {
	h.mu.Lock()
	h.lists = append(h.lists, append([]Endpoint(nil), eps...))
	h.mu.Unlock()
	h.collector.update(eps)
}

// since returns the lists published from index i on, and the current length.
func (h *history) since(i int) ([][]Endpoint, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lists[i:], len(h.lists)
}

// poolScenario drives an InferencePool and its pods through appearance, readiness, selector and
// port changes, relabelling, deletion and recreation; it runs against fake clientsets and, in
// the envtest test, a real API server. Discovery reads through pods and pools; the scenario
// writes through cs and pcs. startDeleting puts the pool in the state of a deletion held up by a
// finalizer, and finishDeleting makes it go away.
func poolScenario(t *testing.T, pods kubernetes.Interface, pools poolclient.Interface, cs kubernetes.Interface,
	pcs poolclient.Interface, startDeleting, finishDeleting func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
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
	editPool := func(edit func(*inferencev1.InferencePool)) {
		t.Helper()
		p, err := pcs.InferenceV1().InferencePools("ns").Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		edit(p)
		if _, err := pcs.InferenceV1().InferencePools("ns").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(rolePod("a-0", "10.0.1.1", "a", true))
	create(rolePod("a-1", "10.0.1.2", "a", false))
	create(rolePod("b-0", "10.0.2.1", "b", true))
	// Another pool in the namespace: not the router's.
	if _, err := pcs.InferenceV1().InferencePools("ns").Create(ctx, inferencePool("other", "b", 8000), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	h := &history{collector: newCollector()}
	src := &InferencePool{Client: pods, Pools: pools, Namespace: "ns", Name: "pool", EventsPort: 6000,
		Log: logr.Discard(), Debounce: 20 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, h.update) }()
	h.wait(t, "empty list while the pool is missing", func(e []Endpoint) bool { return len(e) == 0 })
	_, mark := h.since(0)

	// The pool appears: its selector and target port (not the pod's named http port) count.
	if _, err := pcs.InferenceV1().InferencePools("ns").Create(ctx, inferencePool("pool", "a", 8200), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := h.wait(t, "pool a", func(e []Endpoint) bool { return names(e) == "a-0,a-1(unready)" })
	if want := (Endpoint{Name: "a-0", URL: "http://10.0.1.1:8200", KVEvents: "tcp://10.0.1.1:5557",
		KVReplay: "tcp://10.0.1.1:5558", Ready: true}); got[0] != want {
		t.Fatalf("a-0:\n got %+v\nwant %+v", got[0], want)
	}
	b, err := cs.CoreV1().Pods("ns").Get(ctx, "a-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Status.Conditions[0].Status = corev1.ConditionTrue
	if _, err := cs.CoreV1().Pods("ns").UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "a-1 ready", func(e []Endpoint) bool { return names(e) == "a-0,a-1" })

	// The selector changes: the pod watch follows it.
	editPool(func(p *inferencev1.InferencePool) { p.Spec.Selector = inferencePool("", "b").Spec.Selector })
	h.wait(t, "selector b", func(e []Endpoint) bool { return names(e) == "b-0" })

	// Several target ports: an engine per port, event ports offset by the port's index.
	editPool(func(p *inferencev1.InferencePool) {
		p.Spec.TargetPorts = inferencePool("", "", 8000, 8001).Spec.TargetPorts
	})
	got = h.wait(t, "two ports", func(e []Endpoint) bool { return names(e) == "b-0:8000,b-0:8001" })
	if got[0].URL != "http://10.0.2.1:8000" || got[1].URL != "http://10.0.2.1:8001" ||
		got[0].KVEvents != "tcp://10.0.2.1:5557" || got[1].KVEvents != "tcp://10.0.2.1:5558" ||
		got[1].KVReplay != "tcp://10.0.2.1:5559" {
		t.Fatalf("two ports: %+v", got)
	}
	// A pod relabelled into the pool joins it.
	a0, err := cs.CoreV1().Pods("ns").Get(ctx, "a-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a0.Labels["pool-role"] = "b"
	if _, err := cs.CoreV1().Pods("ns").Update(ctx, a0, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "a-0 relabelled", func(e []Endpoint) bool { return names(e) == "a-0:8000,a-0:8001,b-0:8000,b-0:8001" })
	lists, mark2 := h.since(mark)
	for i, l := range lists {
		if len(l) == 0 {
			t.Fatalf("an empty list was published while the pool existed (update %d of %d)", i, len(lists))
		}
		if i > 0 && equal(l, lists[i-1]) {
			t.Fatalf("the same list was published twice in a row: %+v", l)
		}
	}

	// Being deleted (a finalizer holds it), then gone: no engines, and no crash.
	startDeleting(ctx)
	h.wait(t, "empty list while the pool is being deleted", func(e []Endpoint) bool { return len(e) == 0 })
	finishDeleting(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := pcs.InferenceV1().InferencePools("ns").Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool is not gone")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	lists, _ = h.since(mark2)
	if len(lists) != 1 || len(lists[0]) != 0 {
		t.Fatalf("deletion published %d lists, want one empty list: %+v", len(lists), lists)
	}

	// Recreated with another selector and port.
	if _, err := pcs.InferenceV1().InferencePools("ns").Create(ctx, inferencePool("pool", "a", 8300), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = h.wait(t, "pool recreated", func(e []Endpoint) bool { return names(e) == "a-1" })
	if got[0].URL != "http://10.0.1.2:8300" {
		t.Fatalf("recreated: %+v", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
}

// newPoolClientset is a fake InferencePool clientset. Not NewClientset: its field-managed tracker
// knows no CRD types (kubernetes/kubernetes#126850).
func newPoolClientset(objs ...runtime.Object) *poolfake.Clientset {
	return poolfake.NewSimpleClientset(objs...)
}

func TestInferencePoolFakeClient(t *testing.T) {
	cs := fake.NewClientset()
	pcs := newPoolClientset()
	// The fake tracker deletes at once, finalizers or not: a deletion in progress is written.
	startDeleting := func(ctx context.Context) {
		p, err := pcs.InferenceV1().InferencePools("ns").Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		p.DeletionTimestamp = &now
		if _, err := pcs.InferenceV1().InferencePools("ns").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	finishDeleting := func(ctx context.Context) {
		if err := pcs.InferenceV1().InferencePools("ns").Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poolScenario(t, cs, pcs, cs, pcs, startDeleting, finishDeleting)
}

// An invalid pool (the CRD's validation keeps these out of a real cluster) selects nothing
// until it is fixed; it does not fail the source.
func TestInferencePoolInvalid(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(rolePod("a-0", "10.0.1.1", "a", true))
	noPorts := inferencePool("pool", "a")
	pcs := newPoolClientset(noPorts)
	h := &history{collector: newCollector()}
	src := &InferencePool{Client: cs, Pools: pcs, Namespace: "ns", Name: "pool", Log: logr.Discard(),
		Debounce: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, h.update) }()
	h.wait(t, "no ports: empty", func(e []Endpoint) bool { return len(e) == 0 })

	fixed := inferencePool("pool", "a", 8000)
	if _, err := pcs.InferenceV1().InferencePools("ns").Update(ctx, fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "fixed", func(e []Endpoint) bool { return names(e) == "a-0" })

	for name, edit := range map[string]func(*inferencev1.InferencePool){
		"no labels": func(p *inferencev1.InferencePool) { p.Spec.Selector.MatchLabels = nil },
		"bad label": func(p *inferencev1.InferencePool) { p.Spec.Selector.MatchLabels["pool-role"] = "-x-" },
		"port 0":    func(p *inferencev1.InferencePool) { p.Spec.TargetPorts[0].Number = 0 },
		"repeated port": func(p *inferencev1.InferencePool) {
			p.Spec.TargetPorts = append(p.Spec.TargetPorts, p.Spec.TargetPorts[0])
		},
	} {
		bad := inferencePool("pool", "a", 8000)
		edit(bad)
		if _, _, err := poolTarget(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if _, err := pcs.InferenceV1().InferencePools("ns").Update(ctx, bad, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.wait(t, name+": empty", func(e []Endpoint) bool { return len(e) == 0 })
		if _, err := pcs.InferenceV1().InferencePools("ns").Update(ctx, fixed, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.wait(t, name+": fixed", func(e []Endpoint) bool { return names(e) == "a-0" })
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
}

func TestInferencePoolConfig(t *testing.T) {
	for _, src := range []*InferencePool{
		{Pools: newPoolClientset(), Namespace: "ns", Name: "p"},
		{Client: fake.NewClientset(), Namespace: "ns", Name: "p"},
		{Client: fake.NewClientset(), Pools: newPoolClientset(), Name: "p"},
		{Client: fake.NewClientset(), Pools: newPoolClientset(), Namespace: "ns"},
	} {
		if err := src.Run(context.Background(), func([]Endpoint) {}); err == nil {
			t.Errorf("%+v: accepted", src)
		}
	}
	// A cancelled context ends a source still waiting for its first list.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	src := &InferencePool{Client: fake.NewClientset(), Pools: newPoolClientset(), Namespace: "ns", Name: "p", Log: logr.Discard()}
	if err := src.Run(ctx, func([]Endpoint) {}); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
}

// logLines is a logger that keeps what it is given.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, args)
		l.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
}

func (l *logLines) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// Without the CRD, or without permission, the source keeps retrying and says why; once the list
// works it serves.
func TestInferencePoolListFailures(t *testing.T) {
	gr := schema.GroupResource{Group: "inference.networking.k8s.io", Resource: "inferencepools"}
	for _, c := range []struct {
		err  error
		hint string
	}{
		{apierrors.NewNotFound(gr, ""), "CRD"},
		{apierrors.NewForbidden(gr, "", errors.New("no")), "Role must allow list and watch"},
		{apierrors.NewResourceExpired("too old"), "watch restarts"},
		{errors.New("boom"), "retrying"},
	} {
		var l logLines
		poolWatchError(l.logger(), c.err)
		if !l.has(c.hint) {
			t.Errorf("%v: logged %q, want a line with %q", c.err, l.lines, c.hint)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(rolePod("a-0", "10.0.1.1", "a", true))
	pcs := newPoolClientset(inferencePool("pool", "a", 8000))
	var failed atomic.Bool
	pcs.PrependReactor("list", "inferencepools", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed.CompareAndSwap(false, true) {
			return true, nil, apierrors.NewNotFound(gr, "")
		}
		return false, nil, nil
	})
	var l logLines
	c := newCollector()
	src := &InferencePool{Client: cs, Pools: pcs, Namespace: "ns", Name: "pool", Log: l.logger(), Debounce: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, c.update) }()
	c.wait(t, "served after a failed list", func(e []Endpoint) bool { return names(e) == "a-0" })
	if !l.has("is the InferencePool CRD") {
		t.Errorf("the failed list was not logged: %q", l.lines)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
}
