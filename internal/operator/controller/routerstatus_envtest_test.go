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

package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/internal/operator/routerstatus"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// stubRouter serves a /v1/status document the test changes at will, on 127.0.0.1.
type stubRouter struct {
	mu     sync.Mutex
	doc    routerapi.Status
	failed bool
	reads  int
	srv    *httptest.Server
}

func newStubRouter(kvr *v1alpha1.KVRouter) *stubRouter {
	s := &stubRouter{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reads++
		if r.URL.Path != routerstatus.StatusPath || s.failed {
			http.Error(w, "stub says no", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(s.doc)
	}))
	key := kvr.Namespace + "/" + kvr.Name
	routerStubs.Store(key, s.srv.URL)
	DeferCleanup(func() { routerStubs.Delete(key); s.srv.Close() })
	return s
}

func (s *stubRouter) set(mutate func(*routerapi.Status)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mutate(&s.doc)
}

func (s *stubRouter) readCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// fleetDoc is a healthy two-engine fleet at the given hit rate and total preemptions per minute.
func fleetDoc(hitRate, preemptionsPerMinute float64) routerapi.Status {
	d := routerapi.Status{Policy: "Auto", BlockSize: 16, ReadyEndpoints: 2,
		Fleet:  routerapi.Fleet{HitRate: hitRate, HitRateValid: true, PreemptionsPerMinute: preemptionsPerMinute},
		Router: routerapi.RouterStats{PromptTokens: 1000, CachedPromptTokens: 850, RoutedHitRate: 0.85}}
	for _, name := range []string{"e-0", "e-1"} {
		d.Endpoints = append(d.Endpoints, routerapi.Endpoint{Name: name, Ready: true,
			Engine: &routerapi.EngineMetrics{HitRate: hitRate, HitRateValid: true, KVUsage: 0.4,
				PreemptionsPerMinute: preemptionsPerMinute / 2, PrefixCacheQueries: 1e4, BlockSize: "16", HashAlgo: "sha256_cbor"},
			Events: &routerapi.EventHealth{Connected: true, Batches: 100, Gaps: 1}})
	}
	return d
}

var _ = Describe("KVRouter status from the router", func() {
	ctx := context.Background()

	It("reports hit rate, preemptions, endpoints and the router-derived conditions, and writes only on change", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "observed").Simulate().Replicas(2).RouterReplicas(1).Obj()
		stub := newStubRouter(kvr)
		stub.set(func(d *routerapi.Status) { *d = fleetDoc(0.9, 0) })
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())

		By("no router replica ready: nothing is read")
		Eventually(func(g Gomega) {
			expectCondition(g, reload(g, k8sClient, kvr), routerstatus.ConditionRouterStatusAvailable,
				metav1.ConditionFalse, routerstatus.ReasonRouterNotReady)
		}).Should(Succeed())
		Expect(stub.readCount()).To(BeZero())

		By("the router ready: the fleet's numbers and one row per endpoint")
		setDeploymentReady(k8sClient, ns, render.EngineWorkloadName(kvr), 2)
		setDeploymentReady(k8sClient, ns, render.RouterName(kvr), 1)
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			expectCondition(g, cur, routerstatus.ConditionRouterStatusAvailable, metav1.ConditionTrue, routerstatus.ReasonPolled)
			g.Expect(cur.Status.Cache).NotTo(BeNil())
			g.Expect(cur.Status.Cache.HitRate).To(Equal("90.0%"))
			g.Expect(cur.Status.Cache.PredictedHitRate).To(Equal("85.0%"))
			g.Expect(cur.Status.Cache.PreemptionsPerMinute).To(Equal("0.0"))
			g.Expect(cur.Status.Cache.Window.Duration).To(Equal(time.Minute))
			g.Expect(cur.Status.Cache.LastSampleTime).NotTo(BeNil())
			g.Expect(cur.Status.Endpoints).To(HaveLen(2))
			g.Expect(cur.Status.Endpoints[1]).To(Equal(v1alpha1.EndpointStatus{Name: "e-1", Ready: true, HitRate: "90.0%",
				KVUsage: "40%", PreemptionsPerMinute: "0.0", EventLag: "<1s", EventGaps: 1, EventsHealthy: true}))
			expectCondition(g, cur, routerstatus.ConditionCacheThrashing, metav1.ConditionFalse, routerstatus.ReasonPreemptionsLow)
			expectCondition(g, cur, routerstatus.ConditionEventsDegraded, metav1.ConditionFalse, routerstatus.ReasonEventsCurrent)
			expectCondition(g, cur, routerstatus.ConditionTokenizerDegraded, metav1.ConditionFalse, routerstatus.ReasonTokenizeWorking)
			expectCondition(g, cur, routerstatus.ConditionEngineConfigMismatch, metav1.ConditionFalse, routerstatus.ReasonConfigMatches)
			expectCondition(g, cur, ConditionReady, metav1.ConditionTrue, ReasonServing)
		}).Should(Succeed())

		By("a steady fleet: the router is read on a timer, the KVRouter is not written")
		rv := settledValue(func(g Gomega) string { return reload(g, k8sClient, kvr).ResourceVersion })
		reads := stub.readCount()
		Eventually(stub.readCount).Should(BeNumerically(">=", reads+3), "the router is not read on a timer")
		Consistently(func(g Gomega) string { return reload(g, k8sClient, kvr).ResourceVersion }).
			WithTimeout(time.Second).WithPolling(200 * time.Millisecond).Should(Equal(rv))
		Expect(reload(Default, k8sClient, kvr).ResourceVersion).To(Equal(rv))

		By("preemptions with a high hit rate: CacheThrashing and a Warning Event")
		stub.set(func(d *routerapi.Status) { *d = fleetDoc(0.95, 12) })
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			c := expectCondition(g, cur, routerstatus.ConditionCacheThrashing, metav1.ConditionTrue, routerstatus.ReasonPreemptionsWithHighHitRate)
			g.Expect(c.Message).To(ContainSubstring("95.0%"))
			g.Expect(cur.Status.Cache.PreemptionsPerMinute).To(Equal("12.0"))
			g.Expect(eventReasons(g, k8sClient, kvr)).To(ContainElement(EventCacheThrashing))
		}).Should(Succeed())

		By("preemptions stop: thrashing ends, with an Event")
		stub.set(func(d *routerapi.Status) { *d = fleetDoc(0.95, 0) })
		Eventually(func(g Gomega) {
			expectCondition(g, reload(g, k8sClient, kvr), routerstatus.ConditionCacheThrashing, metav1.ConditionFalse, routerstatus.ReasonPreemptionsLow)
			g.Expect(eventReasons(g, k8sClient, kvr)).To(ContainElement(EventCacheThrashingEnded))
		}).Should(Succeed())

		By("KV events not current, the tokenizer failing, an engine on another block size, the router's tokenizer disagreeing")
		stub.set(func(d *routerapi.Status) {
			*d = fleetDoc(0.95, 0)
			d.Degradations = []routerapi.Degradation{
				{Type: "EventsDegraded", Message: "KV events not current from 1 endpoint(s), e.g. e-1"},
				{Type: "TokenizerUnavailable", Message: "requests are routed by load alone while /tokenize fails: HTTP 500"},
			}
			d.Endpoints[1].Engine.BlockSize = "32"
			d.Tokenizer = &routerapi.Tokenizer{Mode: "auto", Source: "engine", Origin: "hub:org/model@main", Mismatches: 1}
		})
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			c := expectCondition(g, cur, routerstatus.ConditionEventsDegraded, metav1.ConditionTrue, routerstatus.ReasonEventsNotCurrent)
			g.Expect(c.Message).To(ContainSubstring("e-1"))
			expectCondition(g, cur, routerstatus.ConditionTokenizerDegraded, metav1.ConditionTrue, routerstatus.ReasonTokenizeFailing)
			c = expectCondition(g, cur, routerstatus.ConditionEngineConfigMismatch, metav1.ConditionTrue, routerstatus.ReasonConfigDiffers)
			g.Expect(c.Message).To(ContainSubstring("e-1 reports block size 32"))
			c = expectCondition(g, cur, routerstatus.ConditionTokenizerMismatch, metav1.ConditionTrue, routerstatus.ReasonDisagreesWithEngines)
			g.Expect(c.Message).To(ContainSubstring("hub:org/model@main"))
			g.Expect(eventReasons(g, k8sClient, kvr)).To(ContainElements(EventEventsDegraded, EventEngineConfigMismatch, EventTokenizerMismatch))
			// Serving goes on: these are warnings, not outages.
			expectCondition(g, cur, ConditionReady, metav1.ConditionTrue, ReasonServing)
		}).Should(Succeed())

		By("the poller and the reconciler each own their part of the status")
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.Engines).To(Equal(v1alpha1.ReplicaStatus{Desired: 2, Ready: 2}))
			g.Expect(cur.Status.Router).To(Equal(v1alpha1.ReplicaStatus{Desired: 1, Ready: 1}))
			g.Expect(cur.Status.Replicas).To(BeEquivalentTo(2))
			g.Expect(appliedBy(cur, StatusFieldManager, "status", "cache")).To(BeTrue())
			for _, f := range []string{"engines", "router", "replicas", "selector", "url"} {
				g.Expect(appliedBy(cur, StatusFieldManager, "status", f)).To(BeFalse(), "the poller owns status.%s", f)
				g.Expect(appliedBy(cur, FieldManager, "status", f)).To(BeTrue(), "the reconciler does not own status.%s", f)
			}
			g.Expect(appliedBy(cur, FieldManager, "status", "cache")).To(BeFalse())
		}).Should(Succeed())

		By("the router stops answering: a condition, the last numbers kept, no error loop")
		stub.mu.Lock()
		stub.failed = true
		stub.mu.Unlock()
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			c := expectCondition(g, cur, routerstatus.ConditionRouterStatusAvailable, metav1.ConditionFalse, routerstatus.ReasonUnreachable)
			g.Expect(c.Message).To(ContainSubstring("HTTP 503"))
			g.Expect(cur.Status.Cache.HitRate).To(Equal("95.0%"))
			expectCondition(g, cur, ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected)
			g.Expect(eventReasons(g, k8sClient, kvr)).To(ContainElement(EventRouterStatusUnavailable))
		}).Should(Succeed())
		// Still read on the timer, and no faster: not retried in a tight loop. Reads are at
		// least half an interval apart.
		reads = stub.readCount()
		since := time.Now()
		Eventually(stub.readCount).Should(BeNumerically(">=", reads+3))
		Expect(stub.readCount() - reads).To(BeNumerically("<=", int(time.Since(since)/(testStatusPoll/2))+2))
	})

	It("lists the printer columns kubectl shows", func() {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		Expect(k8sClient.Get(ctx, types.NamespacedName{Name: "kvrouters.serving.kvrouter.dev"}, crd)).To(Succeed())
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		Expect(versions).To(HaveLen(1))
		cols, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "additionalPrinterColumns")
		byName := map[string]string{}
		var shown []string
		for _, c := range cols {
			m := c.(map[string]any)
			byName[m["name"].(string)] = m["jsonPath"].(string)
			if p, _ := m["priority"].(int64); p == 0 {
				shown = append(shown, m["name"].(string))
			}
		}
		Expect(shown).To(Equal([]string{"Ready", "Replicas", "HitRate", "Preemptions", "Age"}))
		Expect(byName).To(HaveKeyWithValue("HitRate", ".status.cache.hitRate"))
		Expect(byName).To(HaveKeyWithValue("Preemptions", ".status.cache.preemptionsPerMinute"))
		Expect(byName).To(HaveKeyWithValue("Replicas", ".status.replicas"))
	})

	It("scales the engines through the scale subresource, as kubectl scale and HPA-style tools do", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "scalable").Simulate().Replicas(1).Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())
		Eventually(func(g Gomega) {
			child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &appsv1.Deployment{})
		}).Should(Succeed())

		scale := &autoscalingv1.Scale{}
		Expect(k8sClient.SubResource("scale").Get(ctx, kvr, scale)).To(Succeed())
		Expect(scale.Spec.Replicas).To(BeEquivalentTo(1))
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.SubResource("scale").Get(ctx, kvr, scale)).To(Succeed())
			g.Expect(scale.Status.Selector).To(Equal(render.EngineSelector(kvr)))
		}).Should(Succeed())

		scaleTo(k8sClient, kvr, 3)
		Eventually(func(g Gomega) {
			g.Expect(reload(g, k8sClient, kvr).Spec.Engine.Replicas).To(HaveValue(BeEquivalentTo(3)))
			d := child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &appsv1.Deployment{})
			g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(3)))
		}).Should(Succeed())

		By("the scale subresource's status is the ready engine count")
		setDeploymentReady(k8sClient, ns, render.EngineWorkloadName(kvr), 3)
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.SubResource("scale").Get(ctx, kvr, scale)).To(Succeed())
			g.Expect(scale.Status.Replicas).To(BeEquivalentTo(3))
		}).Should(Succeed())
	})
})
