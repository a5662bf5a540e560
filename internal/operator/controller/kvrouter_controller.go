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

// Package controller holds the KVRouter reconciler: it applies what internal/operator/render produces
// with server-side apply, deletes children the spec no longer asks for, tolerates clusters that
// lack the optional CRDs (Gateway API and its Inference Extension, KEDA, LeaderWorkerSet,
// Prometheus Operator), and reports status and Events.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/internal/operator/routerstatus"
)

// DefaultRecheckInterval is how often the optional CRDs are rediscovered, and how soon a
// KVRouter that waits for one is reconciled again.
const DefaultRecheckInterval = 30 * time.Second

// Event reasons.
const (
	EventReady           = "Ready"
	EventNotReady        = "NotReady"
	EventApplyFailed     = "ApplyFailed"
	EventInvalidSpec     = "InvalidSpec"
	EventCRDNotInstalled = "CRDNotInstalled"
	EventDeleted         = "Deleted"
)

// RBAC: only what the operator uses; rbac_test.go checks every permission against the requests
// of the whole envtest suite. Children are written with server-side apply (patch, and create
// when the patch creates the object), read from the cache (list, watch), and deleted when the
// spec stops asking for them; the operator never gets or updates them.
// +kubebuilder:rbac:groups=serving.kvrouter.dev,resources=kvrouters,verbs=get;list;watch
// +kubebuilder:rbac:groups=serving.kvrouter.dev,resources=kvrouters/status,verbs=patch
// +kubebuilder:rbac:groups=serving.kvrouter.dev,resources=kvrouters/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=inference.networking.k8s.io,resources=inferencepools,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=leaderworkerset.x-k8s.io,resources=leaderworkersets,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors;podmonitors;prometheusrules,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
//
// The router's namespaced Role grants list/watch on pods. Kubernetes only lets the operator
// create a Role that grants what the operator holds itself, hence:
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch

// KVRouterReconciler reconciles KVRouter objects.
type KVRouterReconciler struct {
	Client   client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	// RenderOptions are the operator-wide settings passed to render.Objects.
	RenderOptions render.Options
	// RecheckInterval overrides DefaultRecheckInterval (tests shorten it).
	RecheckInterval time.Duration

	// RouterURL returns the base URL of a KVRouter's router admin API, which the operator reads
	// /v1/status from. Nil: the router Service's admin port (render.RouterAdminURL). Tests point
	// it at a stub, since envtest has no Service networking.
	RouterURL func(*v1alpha1.KVRouter) string
	// HTTPClient reads the router's status. Nil: http.DefaultClient.
	HTTPClient *http.Client
	// StatusPollInterval overrides DefaultStatusPollInterval; StatusTimeout bounds one read
	// (default routerstatus.DefaultTimeout).
	StatusPollInterval time.Duration
	StatusTimeout      time.Duration
	// StatusThresholds tune the router-derived conditions. Zero: routerstatus.DefaultThresholds.
	StatusThresholds *routerstatus.Thresholds

	kinds *kindRegistry
	ctrl  controller.Controller
	cache cache.Cache
	// apiReader reads KVRouters past the cache (see getKVRouter). Nil: Client.
	apiReader client.Reader

	mu      sync.Mutex
	watched map[schema.GroupVersionKind]bool
}

// CacheOptions restricts the manager's cache for the child kinds to objects that carry the
// operator's managed-by label, so the operator does not hold every Deployment, Service and Role
// of the cluster in memory. Only core kinds can be listed here: the cache resolves these kinds
// when it is created, and an optional CRD may be missing then.
func CacheOptions() cache.Options {
	managed := labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.ManagedBy})
	byObject := map[client.Object]cache.ByObject{}
	for _, gvk := range coreChildKinds {
		obj, err := clientgoscheme.Scheme.New(gvk)
		if err != nil {
			continue
		}
		byObject[obj.(client.Object)] = cache.ByObject{Label: managed}
	}
	return cache.Options{ByObject: byObject}
}

// SetupWithManager registers the reconciler. It discovers which optional CRDs the cluster serves
// and watches only those; a CRD installed later is watched from the reconcile that first sees it.
func (r *KVRouterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.RecheckInterval <= 0 {
		r.RecheckInterval = DefaultRecheckInterval
	}
	r.kinds = newKindRegistry(mgr.GetRESTMapper(), r.RecheckInterval)
	r.watched = map[schema.GroupVersionKind]bool{}
	r.cache = mgr.GetCache()
	r.apiReader = mgr.GetAPIReader()
	log := mgr.GetLogger().WithName("kvrouter")
	if _, err := r.kinds.refresh(true); err != nil {
		// Not fatal: the kinds that could not be discovered are treated as missing and
		// rediscovered on the next reconcile.
		log.Error(err, "discovering optional CRDs")
	}

	b := ctrl.NewControllerManagedBy(mgr).
		Named("kvrouter").
		// Status writes by this controller do not change the generation; labels are copied to
		// children through the allow-list, so they count too.
		For(&v1alpha1.KVRouter{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{})))
	for _, gvk := range r.kinds.installedKinds() {
		obj, err := r.newObject(gvk)
		if err != nil {
			return err
		}
		b = b.Owns(obj)
		r.watched[gvk] = true
	}
	for _, k := range OptionalKinds {
		if !r.watched[k.GVK] {
			log.Info("CRD not installed: its kind is not watched; KVRouters that need it report the CRDsInstalled condition", "crd", k.CRD)
		}
	}
	c, err := b.Build(r)
	if err != nil {
		return err
	}
	r.ctrl = c
	return r.setupStatusPoller(mgr)
}

// newObject returns an empty object of gvk for watches: typed when the scheme knows the kind,
// unstructured otherwise (KEDA, Prometheus Operator).
func (r *KVRouterReconciler) newObject(gvk schema.GroupVersionKind) (client.Object, error) {
	if obj, err := r.Scheme.New(gvk); err == nil {
		if co, ok := obj.(client.Object); ok {
			return co, nil
		}
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// watchNewKinds starts watching optional kinds whose CRDs appeared after the manager started.
func (r *KVRouterReconciler) watchNewKinds(ctx context.Context, added []schema.GroupVersionKind) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, gvk := range added {
		if r.watched[gvk] {
			continue
		}
		obj, err := r.newObject(gvk)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		src := source.Kind(r.cache, obj, handler.EnqueueRequestForOwner(r.Scheme, r.Client.RESTMapper(), &v1alpha1.KVRouter{}, handler.OnlyControllerOwner()))
		if err := r.ctrl.Watch(src); err != nil {
			errs = append(errs, fmt.Errorf("watching %s: %w", gvk.Kind, err))
			continue
		}
		r.watched[gvk] = true
		logf.FromContext(ctx).Info("CRD installed: watching its kind", "kind", gvk.Kind)
	}
	return errors.Join(errs...)
}

// Reconcile applies the children of one KVRouter and writes its status.
func (r *KVRouterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	log := logf.FromContext(ctx)
	kvr := &v1alpha1.KVRouter{}
	if err := r.getKVRouter(ctx, req.NamespacedName, kvr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !kvr.DeletionTimestamp.IsZero() {
		// Children carry ownerReferences: the garbage collector deletes them.
		return ctrl.Result{}, nil
	}
	// Typed objects read from the cache may lack TypeMeta; render sets ownerReferences from it.
	kvr.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("KVRouter"))

	before := kvr.DeepCopy()
	obs := &observation{}
	defer func() {
		computeStatus(kvr, obs)
		// observedGeneration says "the status describes this spec": only a reconcile that ran to
		// its end may claim it. A refused spec is such an end (retrying cannot help).
		if reterr == nil {
			kvr.Status.ObservedGeneration = kvr.Generation
		}
		r.recordTransitions(before, kvr, obs)
		if !equality.Semantic.DeepEqual(before.Status, kvr.Status) {
			if err := r.writeStatus(ctx, kvr); err != nil && !apierrors.IsNotFound(err) {
				reterr = errors.Join(reterr, fmt.Errorf("writing status: %w", err))
			}
		}
	}()

	added, err := r.kinds.refresh(false)
	if err != nil {
		log.Error(err, "rediscovering optional CRDs; keeping the previous answer")
	}
	// A kind that cannot be watched yet does not stop the applies, and the status still describes
	// the workloads: returning here would write a status from an empty observation (no engine
	// ready) over a fleet that serves. The error comes back at the end, so the watch is retried.
	watchErr := r.watchNewKinds(ctx, added)
	if watchErr != nil {
		log.Error(watchErr, "watching the kinds of newly installed CRDs; retrying")
	}

	desired := map[childKey]bool{}
	objs, err := render.Objects(kvr.DeepCopy(), r.RenderOptions)
	if err == nil && render.UsesInferencePool(kvr) {
		// The spec is judged as written (above); what is applied is what the cluster can serve.
		if !r.kinds.isInstalled(inferencePoolGVK) {
			k, _ := optionalKindFor(inferencePoolGVK)
			obs.missing = append(obs.missing, k)
			obs.poolFallback = true
			objs, err = render.Objects(withoutInferencePool(kvr), r.RenderOptions)
		} else {
			objs, err = r.applyInferencePool(ctx, kvr, objs, desired, obs)
		}
	}
	if err != nil {
		obs.renderErr = err
		log.Info("spec refused by the renderer; nothing applied", "reason", err.Error())
		return ctrl.Result{}, watchErr
	}

	for _, obj := range objs {
		u, err := toApplyObject(obj, r.Scheme)
		if err != nil {
			obs.applyErrs = append(obs.applyErrs, err.Error())
			continue
		}
		gvk := u.GroupVersionKind()
		desired[childKey{gvk, u.GetName()}] = true
		role := roleOf(kvr, u)
		if !r.kinds.isInstalled(gvk) {
			k, _ := optionalKindFor(gvk)
			obs.missing = append(obs.missing, k)
			if role == roleEngine || role == rolePrefill {
				obs.engineGone = true
			}
			continue
		}
		if isAutoscaled(kvr, role) && !r.kinds.isInstalled(scaledObjectGVK) {
			// Nothing would scale the engines: run them at the floor the spec asks for.
			if err := unstructured.SetNestedField(u.Object, int64(render.PoolMinReplicas(kvr, poolOf(kvr, role))), "spec", "replicas"); err != nil {
				obs.applyErrs = append(obs.applyErrs, err.Error())
				continue
			}
		}
		if err := r.applyChild(ctx, kvr, u, role); err != nil {
			msg := fmt.Sprintf("applying %s %s: %v", gvk.Kind, u.GetName(), err)
			obs.applyErrs = append(obs.applyErrs, msg)
			r.Recorder.Eventf(kvr, nil, corev1.EventTypeWarning, EventApplyFailed, "Apply", "%s", msg)
			// What runs now still serves: report its readiness, not zero.
			if role != roleOther {
				if live, err := readLive(ctx, r.Client, r.Scheme, u); err == nil {
					if err := obs.observeWorkload(live, role); err != nil {
						log.Error(err, "reading status")
					}
				}
			}
			continue
		}
		if err := obs.observeWorkload(u, role); err != nil {
			log.Error(err, "reading status")
		}
	}

	if err := r.deleteUnwanted(ctx, kvr, desired, obs.engineGone); err != nil {
		obs.applyErrs = append(obs.applyErrs, err.Error())
	}
	if len(obs.applyErrs) > 0 {
		return ctrl.Result{}, errors.New(obs.applyErrs[0])
	}
	if watchErr != nil {
		return ctrl.Result{}, watchErr
	}
	if len(obs.missing) > 0 {
		return ctrl.Result{RequeueAfter: r.RecheckInterval}, nil
	}
	return ctrl.Result{}, nil
}

// applyInferencePool applies the InferencePool that objs (the children of InferencePool mode)
// hold, before any other child: the router stops serving HTTP as the pool's endpoint picker, and
// the route sends the Gateway's traffic to the pool, so both may only follow a pool that exists.
// It returns the children left to apply: the rest of objs while a pool of this KVRouter's is
// live, else those of HTTPRoute mode, which keep the router a proxy behind the route (the same
// fallback as for a missing CRD). A failed apply is reported like any other and retried by the
// error the reconcile returns.
func (r *KVRouterReconciler) applyInferencePool(ctx context.Context, kvr *v1alpha1.KVRouter, objs []client.Object,
	desired map[childKey]bool, obs *observation) ([]client.Object, error) {
	var pool client.Object
	rest := make([]client.Object, 0, len(objs))
	for _, obj := range objs {
		if _, ok := obj.(*infv1.InferencePool); ok && pool == nil {
			pool = obj
			continue
		}
		rest = append(rest, obj)
	}
	if pool == nil {
		return objs, nil
	}
	var live *unstructured.Unstructured
	u, err := toApplyObject(pool, r.Scheme)
	msg := ""
	if err != nil {
		msg = err.Error()
	} else if err = r.applyChild(ctx, kvr, u, roleOther); err == nil {
		live = u
	} else {
		msg = fmt.Sprintf("applying %s %s: %v", render.InferencePoolKind, u.GetName(), err)
		// A pool applied by an earlier reconcile may still be there for the Gateways.
		if got, rerr := readLive(ctx, r.Client, r.Scheme, u); rerr == nil {
			live = got
		} else if !apierrors.IsNotFound(rerr) {
			logf.FromContext(ctx).Error(rerr, "reading the InferencePool after its apply failed")
		}
	}
	if err != nil {
		obs.applyErrs = append(obs.applyErrs, msg)
		obs.poolErr = err
		r.Recorder.Eventf(kvr, nil, corev1.EventTypeWarning, EventApplyFailed, "Apply", "%s", msg)
	}
	if !keepPoolMode(err, live, kvr.UID) {
		obs.poolFallback = true
		return render.Objects(withoutInferencePool(kvr), r.RenderOptions)
	}
	desired[childKey{inferencePoolGVK, pool.GetName()}] = true
	if oerr := obs.observePool(live); oerr != nil {
		logf.FromContext(ctx).Error(oerr, "reading status")
	}
	return rest, nil
}

// getKVRouter reads the KVRouter from the API server rather than the cache. Both controllers
// compute a status from the object they read and write it when it differs; a cached copy that
// lags the last status write (a reconcile queued by another event runs before the informer has
// seen that write) would look like a transition, re-stamp lastTransitionTime, emit the Event
// again and write twice. One GET per reconcile is cheap next to the applies that follow.
func (r *KVRouterReconciler) getKVRouter(ctx context.Context, key types.NamespacedName, kvr *v1alpha1.KVRouter) error {
	if r.apiReader == nil {
		return r.Client.Get(ctx, key, kvr)
	}
	return r.apiReader.Get(ctx, key, kvr)
}

// childRole says which of a KVRouter's workloads an object is, if any.
type workloadRole int

const (
	roleOther workloadRole = iota
	// roleEngine: the engine workload spec.engine.replicas sizes (the decode pool when
	// disaggregated).
	roleEngine
	roleRouter
	// rolePrefill: the prefill pool's workload.
	rolePrefill
)

func roleOf(kvr *v1alpha1.KVRouter, u *unstructured.Unstructured) workloadRole {
	gvk := u.GroupVersionKind()
	isEngineKind := gvk.Kind == render.EngineWorkloadKind(kvr) && gvk.GroupVersion().String() == render.EngineWorkloadAPIVersion(kvr)
	switch {
	case isEngineKind && u.GetName() == render.ScaleWorkloadName(kvr):
		return roleEngine
	case isEngineKind && render.Disaggregated(kvr) && u.GetName() == render.PoolWorkloadName(kvr, render.PoolPrefill):
		return rolePrefill
	case gvk == appsv1.SchemeGroupVersion.WithKind("Deployment") && u.GetName() == render.RouterName(kvr):
		return roleRouter
	}
	return roleOther
}

// writeStatus applies the status through the status subresource, less what the status poller
// owns (status.cache, status.endpoints and the router-derived conditions; see routerpoll.go).
// Server-side apply, rather than a merge patch computed against the cached object, needs no
// resourceVersion (so no conflicts with concurrent spec edits) and removes fields the operator
// stops reporting. The uid
// makes sure a KVRouter deleted and recreated meanwhile does not get a stale status.
func (r *KVRouterReconciler) writeStatus(ctx context.Context, kvr *v1alpha1.KVRouter) error {
	own := kvr.Status.DeepCopy()
	own.Cache, own.Endpoints, own.EndpointsOmitted = nil, nil, 0
	if d := own.Disaggregation; d != nil {
		// The pools' replica counts only: the rest is the poller's (routerpoll.go).
		own.Disaggregation = &v1alpha1.DisaggregationStatus{Pools: v1alpha1.DisaggregationPools{
			Prefill: v1alpha1.PoolStatus{Desired: d.Pools.Prefill.Desired, Ready: d.Pools.Prefill.Ready},
			Decode:  v1alpha1.PoolStatus{Desired: d.Pools.Decode.Desired, Ready: d.Pools.Decode.Ready},
		}}
	}
	own.Conditions = slices.DeleteFunc(own.Conditions, func(c metav1.Condition) bool { return isRouterCondition(c.Type) })
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(own)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": st}}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("KVRouter"))
	u.SetNamespace(kvr.Namespace)
	u.SetName(kvr.Name)
	u.SetUID(kvr.UID)
	return r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership)
}

type childKey struct {
	gvk  schema.GroupVersionKind
	name string
}

// applyChild applies one rendered child. Under autoscaling the engine workload carries no
// replicas: KEDA owns them, and the operator first hands over the count it used to apply.
func (r *KVRouterReconciler) applyChild(ctx context.Context, kvr *v1alpha1.KVRouter, u *unstructured.Unstructured, role workloadRole) error {
	if isAutoscaled(kvr, role) {
		if err := handOverReplicas(ctx, r.Client, r.Scheme, u); err != nil {
			return err
		}
	}
	return apply(ctx, r.Client, u)
}

// deleteUnwanted deletes children of kvr that the spec no longer renders: the HTTPRoute after
// spec.gateway is removed, the InferencePool after spec.gateway.mode leaves InferencePool, the
// ScaledObject after spec.autoscaling is, the Deployment after the engines moved to a
// LeaderWorkerSet. When the engine workload the spec asks for cannot be applied (its CRD is
// missing), the old engine workload is kept: a spec the cluster cannot serve yet must not take
// down what serves now.
func (r *KVRouterReconciler) deleteUnwanted(ctx context.Context, kvr *v1alpha1.KVRouter, desired map[childKey]bool, keepEngines bool) error {
	var errs []error
	for _, gvk := range r.kinds.installedKinds() {
		list := listKind(r.Scheme, gvk)
		if err := r.Client.List(ctx, list, client.InNamespace(kvr.Namespace),
			client.MatchingLabels{render.LabelKVRouter: kvr.Name}); err != nil {
			if meta.IsNoMatchError(err) {
				continue
			}
			errs = append(errs, fmt.Errorf("listing %s: %w", gvk.Kind, err))
			continue
		}
		err := meta.EachListItem(list, func(o runtime.Object) error {
			obj, ok := o.(client.Object)
			if !ok || !isControlledBy(obj, string(kvr.UID)) || desired[childKey{gvk, obj.GetName()}] {
				return nil
			}
			if keepEngines && isEngineWorkloadKind(gvk) && obj.GetLabels()[render.LabelComponent] == render.ComponentEngine {
				return nil
			}
			if err := r.Client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting %s %s: %w", gvk.Kind, obj.GetName(), err)
			}
			logf.FromContext(ctx).Info("deleted a child the spec no longer asks for", "kind", gvk.Kind, "name", obj.GetName())
			r.Recorder.Eventf(kvr, obj, corev1.EventTypeNormal, EventDeleted, "Delete",
				"deleted %s %s: the spec no longer asks for it", gvk.Kind, obj.GetName())
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func isEngineWorkloadKind(gvk schema.GroupVersionKind) bool {
	return gvk == appsv1.SchemeGroupVersion.WithKind("Deployment") || gvk == lwsv1.SchemeGroupVersion.WithKind("LeaderWorkerSet")
}

// recordTransitions emits Events when the KVRouter becomes ready or stops being ready, when a
// needed CRD goes missing, and when the renderer refuses a new spec. Events mark transitions,
// not states, so a steady state emits nothing.
func (r *KVRouterReconciler) recordTransitions(before, after *v1alpha1.KVRouter, obs *observation) {
	was := meta.FindStatusCondition(before.Status.Conditions, ConditionReady)
	now := meta.FindStatusCondition(after.Status.Conditions, ConditionReady)
	wasReady := was != nil && was.Status == metav1.ConditionTrue
	if now != nil {
		switch {
		case now.Status == metav1.ConditionTrue && !wasReady:
			r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, EventReady, "Reconcile", "ready: %s", now.Message)
		case now.Status != metav1.ConditionTrue && wasReady:
			r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, EventNotReady, "Reconcile", "not ready (%s): %s", now.Reason, now.Message)
		}
	}
	wasCRD := meta.FindStatusCondition(before.Status.Conditions, ConditionCRDsInstalled)
	nowCRD := meta.FindStatusCondition(after.Status.Conditions, ConditionCRDsInstalled)
	if nowCRD != nil && nowCRD.Status == metav1.ConditionFalse &&
		(wasCRD == nil || wasCRD.Status != metav1.ConditionFalse || wasCRD.Message != nowCRD.Message) {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, EventCRDNotInstalled, "Reconcile", "%s", nowCRD.Message)
	}
	if obs.renderErr != nil && before.Status.ObservedGeneration != after.Generation {
		wasDeg := meta.FindStatusCondition(before.Status.Conditions, ConditionDegraded)
		if wasDeg == nil || wasDeg.Reason != ReasonInvalidSpec || wasDeg.Message != obs.renderErr.Error() {
			r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, EventInvalidSpec, "Render", "%s", obs.renderErr.Error())
		}
	}
}

// poolOf is the engine pool of an engine workload role.
func poolOf(kvr *v1alpha1.KVRouter, role workloadRole) render.Pool {
	switch {
	case role == rolePrefill:
		return render.PoolPrefill
	case render.Disaggregated(kvr):
		return render.PoolDecode
	}
	return render.PoolNone
}

// isAutoscaled says whether KEDA owns the replica count of the workload of role.
func isAutoscaled(kvr *v1alpha1.KVRouter, role workloadRole) bool {
	if role != roleEngine && role != rolePrefill {
		return false
	}
	return render.PoolAutoscaled(kvr, poolOf(kvr, role))
}
