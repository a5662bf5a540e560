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
	"fmt"
	"net/http"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/internal/operator/routerstatus"
)

// DefaultStatusPollInterval is how often the operator reads each router's /v1/status. The
// engines' rates are one-minute windows, so reading more often shows nothing new.
const DefaultStatusPollInterval = 30 * time.Second

// Event reasons for what the router reports.
const (
	EventCacheThrashing          = "CacheThrashing"
	EventCacheThrashingEnded     = "CacheThrashingEnded"
	EventEventsDegraded          = "EventsDegraded"
	EventEngineConfigMismatch    = "EngineConfigMismatch"
	EventTokenizerMismatch       = "TokenizerMismatch"
	EventRouterStatusUnavailable = "RouterStatusUnavailable"
)

// StatusFieldManager is the server-side apply field manager of what the status poller writes:
// status.cache, status.endpoints and the router-derived conditions. The reconciler's own status
// writes (FieldManager) leave those fields out, so neither overwrites the other.
const StatusFieldManager = "kvrouter-operator-status"

// routerPoll is what the poller remembers about one KVRouter's router between reads.
type routerPoll struct {
	uid  types.UID
	last time.Time
	memo routerstatus.Memo
}

type routerPolls struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*routerPoll
}

// due returns the poll state of kvr, and how long until a read is due (0: now, and the read is
// recorded as taken). Reconciles triggered by workload changes come in bursts during a rollout;
// half an interval between reads keeps them from hammering the router.
func (p *routerPolls) due(kvr *v1alpha1.KVRouter, now time.Time, interval time.Duration) (*routerPoll, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[types.NamespacedName]*routerPoll{}
	}
	key := types.NamespacedName{Namespace: kvr.Namespace, Name: kvr.Name}
	st := p.m[key]
	if st == nil || st.uid != kvr.UID {
		st = &routerPoll{uid: kvr.UID}
		p.m[key] = st
	}
	if !st.last.IsZero() {
		if wait := st.last.Add(interval / 2).Sub(now); wait > 0 {
			return st, wait
		}
	}
	st.last = now
	return st, 0
}

func (p *routerPolls) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, key)
}

// statusPoller reads each KVRouter's router on a timer and writes what it reports into the
// KVRouter's status. It is a controller of its own, with its own queue, so that a timer firing
// does not re-apply every child (the reconciler's work) and a slow router does not hold up
// reconciles of spec changes.
type statusPoller struct {
	*KVRouterReconciler
	polls routerPolls
}

func (r *KVRouterReconciler) setupStatusPoller(mgr ctrl.Manager) error {
	p := &statusPoller{KVRouterReconciler: r}
	return ctrl.NewControllerManagedBy(mgr).
		Named("kvrouter-status").
		For(&v1alpha1.KVRouter{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// The router Deployment turning ready (or not) starts (or stops) the reads at once.
		Owns(&appsv1.Deployment{}).
		Complete(reconcile.Func(p.reconcile))
}

func (r *KVRouterReconciler) pollInterval() time.Duration {
	if r.StatusPollInterval > 0 {
		return r.StatusPollInterval
	}
	return DefaultStatusPollInterval
}

// routerBaseURL is where the router's /v1/status is reached: the router Service's admin port
// unless tests (or an operator running outside the cluster) say otherwise.
func (r *KVRouterReconciler) routerBaseURL(kvr *v1alpha1.KVRouter) string {
	if r.RouterURL != nil {
		return r.RouterURL(kvr)
	}
	return render.RouterAdminURL(kvr)
}

func (r *KVRouterReconciler) thresholds() routerstatus.Thresholds {
	if r.StatusThresholds != nil {
		return *r.StatusThresholds
	}
	return routerstatus.DefaultThresholds()
}

func (p *statusPoller) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	kvr := &v1alpha1.KVRouter{}
	if err := p.getKVRouter(ctx, req.NamespacedName, kvr); err != nil {
		if apierrors.IsNotFound(err) {
			p.polls.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !kvr.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := kvr.DeepCopy()
	st := &kvr.Status
	gen := kvr.Generation
	result := ctrl.Result{}

	router := &appsv1.Deployment{}
	err := p.Client.Get(ctx, types.NamespacedName{Namespace: kvr.Namespace, Name: render.RouterName(kvr)}, router)
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return ctrl.Result{}, fmt.Errorf("reading the router Deployment: %w", err)
	case err != nil || router.Status.ReadyReplicas == 0:
		// The Deployment watch brings the KVRouter back when a router replica is ready.
		routerstatus.Unavailable(st, gen, routerstatus.ReasonRouterNotReady, "no router replica is ready to report cache and event status")
	default:
		poll, wait := p.polls.due(kvr, time.Now(), p.pollInterval())
		if wait > 0 {
			// Read recently: keep those values, but follow a spec change in the conditions'
			// generation.
			for i := range st.Conditions {
				if isRouterCondition(st.Conditions[i].Type) {
					st.Conditions[i].ObservedGeneration = gen
				}
			}
			result.RequeueAfter = wait
			break
		}
		// Nothing in the cluster changes when the router's numbers do: read it on a timer.
		result.RequeueAfter = p.pollInterval()
		client := p.HTTPClient
		if client == nil {
			client = http.DefaultClient
		}
		now := time.Now()
		doc, err := routerstatus.Fetch(ctx, client, p.routerBaseURL(kvr), p.StatusTimeout)
		if err != nil {
			logf.FromContext(ctx).V(1).Info("router status unavailable", "error", err.Error())
			routerstatus.Unavailable(st, gen, routerstatus.ReasonUnreachable, err.Error())
			break
		}
		want := routerstatus.Expect{BlockSize: kvr.Spec.Engine.BlockSize, HashAlgo: kvr.Spec.Engine.PrefixCachingHashAlgo}
		routerstatus.Apply(st, gen, want, doc, now, &poll.memo, p.thresholds())
	}

	p.recordRouterTransitions(before, kvr)
	if equality.Semantic.DeepEqual(before.Status, kvr.Status) {
		return result, nil
	}
	if err := p.writeRouterStatus(ctx, kvr); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("writing status: %w", err)
	}
	return result, nil
}

// writeRouterStatus applies the poller's part of the status with its own field manager. The
// apply object is built field by field: converting a whole KVRouterStatus would carry zero
// values of the reconciler's fields (engines, router, replicas), and applying them would take
// those fields over.
func (p *statusPoller) writeRouterStatus(ctx context.Context, kvr *v1alpha1.KVRouter) error {
	st := map[string]any{}
	if c := kvr.Status.Cache; c != nil {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
		if err != nil {
			return err
		}
		st["cache"] = m
	}
	var rows []any
	for i := range kvr.Status.Endpoints {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&kvr.Status.Endpoints[i])
		if err != nil {
			return err
		}
		rows = append(rows, m)
	}
	if len(rows) > 0 {
		st["endpoints"] = rows
	}
	if n := kvr.Status.EndpointsOmitted; n > 0 {
		st["endpointsOmitted"] = int64(n)
	}
	// Only while the spec asks for the pools: the reconciler's desired and ready (required
	// fields) leave when disaggregation is switched off, and pool figures of a router that still
	// sees the old prefill engines would then make every status write invalid.
	if d := pollerDisaggregation(kvr.Status.Disaggregation); d != nil && render.Disaggregated(kvr) {
		st["disaggregation"] = d
	}
	var conds []any
	for i := range kvr.Status.Conditions {
		if !isRouterCondition(kvr.Status.Conditions[i].Type) {
			continue
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&kvr.Status.Conditions[i])
		if err != nil {
			return err
		}
		conds = append(conds, m)
	}
	if len(conds) > 0 {
		st["conditions"] = conds
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": st}}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("KVRouter"))
	u.SetNamespace(kvr.Namespace)
	u.SetName(kvr.Name)
	u.SetUID(kvr.UID)
	return p.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(StatusFieldManager), client.ForceOwnership)
}

func isRouterCondition(t string) bool {
	switch t {
	case routerstatus.ConditionRouterStatusAvailable, routerstatus.ConditionCacheThrashing,
		routerstatus.ConditionEventsDegraded, routerstatus.ConditionTokenizerDegraded,
		routerstatus.ConditionEngineConfigMismatch, routerstatus.ConditionTokenizerMismatch:
		return true
	}
	return false
}

// recordRouterTransitions emits Events when thrashing starts and ends, when KV events degrade,
// when an engine's configuration stops matching the spec, when the router's tokenizer disagrees
// with the engines', and when the router stops answering.
func (r *KVRouterReconciler) recordRouterTransitions(before, after *v1alpha1.KVRouter) {
	changed := func(t string) (was, now *metav1.Condition, ok bool) {
		was = meta.FindStatusCondition(before.Status.Conditions, t)
		now = meta.FindStatusCondition(after.Status.Conditions, t)
		return was, now, now != nil && (was == nil || was.Status != now.Status)
	}
	if was, now, ok := changed(routerstatus.ConditionCacheThrashing); ok {
		switch {
		case now.Status == metav1.ConditionTrue:
			r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, EventCacheThrashing, "Observe", "%s", now.Message)
		case was != nil && was.Status == metav1.ConditionTrue:
			r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, EventCacheThrashingEnded, "Observe", "cache thrashing ended: %s", now.Message)
		}
	}
	if _, now, ok := changed(routerstatus.ConditionEventsDegraded); ok && now.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, EventEventsDegraded, "Observe", "%s", now.Message)
	}
	if _, now, ok := changed(routerstatus.ConditionEngineConfigMismatch); ok && now.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, EventEngineConfigMismatch, "Observe", "%s", now.Message)
	}
	if _, now, ok := changed(routerstatus.ConditionTokenizerMismatch); ok && now.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, EventTokenizerMismatch, "Observe", "%s", now.Message)
	}
	if was, now, ok := changed(routerstatus.ConditionRouterStatusAvailable); ok && now.Reason == routerstatus.ReasonUnreachable &&
		was != nil && was.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, EventRouterStatusUnavailable, "Observe", "%s", now.Message)
	}
}

// pollerDisaggregation is the poller's part of status.disaggregation, built field by field: the
// pools' desired and ready replicas are the reconciler's, and zero values are left out so that
// the poller owns nothing it does not report.
func pollerDisaggregation(d *v1alpha1.DisaggregationStatus) map[string]any {
	if d == nil || d.Mode == "" {
		return nil
	}
	m := map[string]any{"mode": d.Mode}
	put := func(into map[string]any, k string, v any) {
		switch x := v.(type) {
		case string:
			if x != "" {
				into[k] = x
			}
		case int64:
			if x != 0 {
				into[k] = x
			}
		}
	}
	put(m, "splitShare", d.SplitShare)
	put(m, "splitRequests", d.SplitRequests)
	put(m, "wholeRequests", d.WholeRequests)
	put(m, "fallbacks", d.Fallbacks)
	pools := map[string]any{}
	for name, p := range map[string]v1alpha1.PoolStatus{"prefill": d.Pools.Prefill, "decode": d.Pools.Decode} {
		pm := map[string]any{}
		put(pm, "hitRate", p.HitRate)
		put(pm, "queuedPrefillTokens", p.QueuedPrefillTokens)
		put(pm, "inFlight", p.InFlight)
		if len(pm) > 0 {
			pools[name] = pm
		}
	}
	if len(pools) > 0 {
		m["pools"] = pools
	}
	return m
}
