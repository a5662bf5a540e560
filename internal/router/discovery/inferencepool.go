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
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	poolclient "sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned"
	poolinformers "sigs.k8s.io/gateway-api-inference-extension/client-go/informers/externalversions"
	poollisters "sigs.k8s.io/gateway-api-inference-extension/client-go/listers/api/v1"
)

// InferencePool discovers the engines of one Gateway API Inference Extension InferencePool
// (inference.networking.k8s.io/v1), so that the router serves exactly the pods the gateway
// sends to the pool: the pods of the pool's namespace matching spec.selector.matchLabels, on
// spec.targetPorts. Pod handling is the Kubernetes source's (readiness, terminating pods, named
// kv-events/kv-replay ports, and with several target ports one endpoint per port, see
// Kubernetes.TargetPorts); this source watches the pool and restarts that pod watch whenever the
// selector or the ports change.
//
// A pool that does not exist (yet, or any more) or is being deleted is not an error: the source
// publishes an empty list, logs it, and starts serving when the pool appears, so that the router
// and the pool can be created in either order and a pool can be replaced under a running router.
//
// It needs list and watch on inferencepools.inference.networking.k8s.io and on pods in
// Namespace. The pool is listed and watched with a metadata.name field selector, so a Role may
// narrow the former to the one pool with resourceNames.
type InferencePool struct {
	// Client reads the engine pods, Pools the InferencePool.
	Client kubernetes.Interface
	Pools  poolclient.Interface
	// Namespace holds the pool and its pods: a pool selects pods in its own namespace only.
	Namespace, Name string
	// EventsPort and ReplayPort are the first target port's KV event and replay ports when a
	// pod's container does not name them (kv-events, kv-replay); 0: no events.
	EventsPort, ReplayPort int
	// DPRanks is the number of data-parallel ranks behind each target port (1: none).
	DPRanks int
	Log     logr.Logger
	// Debounce coalesces bursts of pod events (default 200 ms).
	Debounce time.Duration
}

// Run implements Source.
func (s *InferencePool) Run(ctx context.Context, update func([]Endpoint)) error {
	if s.Client == nil || s.Pools == nil || s.Namespace == "" || s.Name == "" {
		return fmt.Errorf("inferencepool discovery needs a pod client, an InferencePool client, a namespace and a pool name")
	}
	log := s.Log.WithValues("inferencePool", s.Namespace+"/"+s.Name)
	factory := poolinformers.NewSharedInformerFactoryWithOptions(s.Pools, 0,
		poolinformers.WithNamespace(s.Namespace),
		poolinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.Name).String()
		}))
	inf := factory.Inference().V1().InferencePools()
	changed, err := changes(inf.Informer())
	if err != nil {
		return fmt.Errorf("InferencePool informer: %w", err)
	}
	// The informer retries a failing list or watch for ever; without this the only trace of a
	// missing CRD or a Role without inferencepools would be klog lines while the router waits.
	if err := inf.Informer().SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		poolWatchError(log, err)
	}); err != nil {
		return fmt.Errorf("InferencePool informer: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("InferencePool informer for %s/%s did not sync", s.Namespace, s.Name)
	}

	f := &poolFollower{src: s, log: log, pub: &publisher{update: update}}
	defer f.stop()
	for {
		f.reconcile(ctx, inf.Lister())
		var podsDone <-chan error
		if f.pods != nil {
			podsDone = f.pods.done
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case err := <-podsDone:
			f.pods = nil
			if err != nil {
				return fmt.Errorf("pods of InferencePool %s/%s: %w", s.Namespace, s.Name, err)
			}
		}
	}
}

// poolWatchError logs a failed list or watch of the pool, with a hint for the two causes an
// operator can fix.
func poolWatchError(log logr.Logger, err error) {
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		// Routine: the informer relists or rewatches.
		log.V(1).Info("InferencePool watch restarts", "reason", err.Error())
	case apierrors.IsNotFound(err):
		log.Error(err, "cannot list InferencePools: is the InferencePool CRD (inference.networking.k8s.io/v1) installed? Retrying")
	case apierrors.IsForbidden(err):
		log.Error(err, "cannot list InferencePools: the router's Role must allow list and watch on inferencepools.inference.networking.k8s.io. Retrying")
	default:
		log.Error(err, "InferencePool watch failed; retrying")
	}
}

// poolState is what the follower last did, so that each change is logged once.
type poolState int

const (
	poolUnknown poolState = iota
	poolMissing
	poolDeleting
	poolInvalid
	poolServing
)

// poolFollower runs one pod watch (a Kubernetes source) for the pool's current selector and
// ports, replacing it when they change. Only Run's goroutine touches it.
type poolFollower struct {
	src   *InferencePool
	log   logr.Logger
	pub   *publisher
	state poolState
	pods  *podWatch
}

type podWatch struct {
	key    string
	cancel context.CancelFunc
	done   chan error
}

func (f *poolFollower) reconcile(ctx context.Context, lister poollisters.InferencePoolLister) {
	pool, err := lister.InferencePools(f.src.Namespace).Get(f.src.Name)
	switch {
	case err != nil:
		// The lister fails only with NotFound.
		f.idle(poolMissing, "InferencePool not found: no engines until it exists")
		return
	case pool.DeletionTimestamp != nil:
		f.idle(poolDeleting, "InferencePool is being deleted: no engines until it is recreated")
		return
	}
	sel, ports, err := poolTarget(pool)
	if err != nil {
		if f.state != poolInvalid {
			f.log.Error(err, "InferencePool is unusable: no engines until it is fixed")
		}
		f.stop()
		f.state = poolInvalid
		f.pub.publish([]Endpoint{})
		return
	}
	key := fmt.Sprint(sel.String(), ports)
	if f.pods != nil && f.pods.key == key {
		return
	}
	f.log.Info("following InferencePool", "selector", sel.String(), "targetPorts", ports)
	if pool.Spec.AppProtocol == inferencev1.AppProtocolH2C {
		f.log.Info("InferencePool asks for appProtocol kubernetes.io/h2c; the router talks HTTP/1.1 to engines regardless")
	}
	// The previous watch's list stays published until the new one has synced, so a selector or
	// port change never leaves the router without engines in between.
	f.stop()
	f.state = poolServing
	pctx, cancel := context.WithCancel(ctx)
	w := &podWatch{key: key, cancel: cancel, done: make(chan error, 1)}
	k := &Kubernetes{Client: f.src.Client, Namespace: f.src.Namespace, Selector: sel, TargetPorts: ports,
		EventsPort: f.src.EventsPort, ReplayPort: f.src.ReplayPort, DPRanks: f.src.DPRanks,
		Log: f.log, Debounce: f.src.Debounce}
	go func() { w.done <- k.Run(pctx, f.pub.publish) }()
	f.pods = w
}

// idle stops following pods and publishes an empty list.
func (f *poolFollower) idle(state poolState, msg string) {
	if f.state != state {
		f.log.Info(msg)
	}
	f.stop()
	f.state = state
	f.pub.publish([]Endpoint{})
}

// stop ends the pod watch and waits for it, so that it cannot publish after its successor.
func (f *poolFollower) stop() {
	if f.pods == nil {
		return
	}
	f.pods.cancel()
	<-f.pods.done
	f.pods = nil
}

// poolTarget is the pod selector and the HTTP ports of a pool.
func poolTarget(pool *inferencev1.InferencePool) (labels.Selector, []int, error) {
	set := make(labels.Set, len(pool.Spec.Selector.MatchLabels))
	for k, v := range pool.Spec.Selector.MatchLabels {
		set[string(k)] = string(v)
	}
	// The CRD requires a label; without one the selector would take every pod in the namespace.
	if len(set) == 0 {
		return nil, nil, fmt.Errorf("spec.selector.matchLabels is empty")
	}
	sel, err := labels.ValidatedSelectorFromSet(set)
	if err != nil {
		return nil, nil, fmt.Errorf("spec.selector.matchLabels: %w", err)
	}
	ports := make([]int, 0, len(pool.Spec.TargetPorts))
	for _, p := range pool.Spec.TargetPorts {
		n := int(p.Number)
		if n < 1 || n > 65535 || slices.Contains(ports, n) {
			return nil, nil, fmt.Errorf("spec.targetPorts: port %d is out of range or repeated", n)
		}
		ports = append(ports, n)
	}
	if len(ports) == 0 {
		return nil, nil, fmt.Errorf("spec.targetPorts is empty")
	}
	return sel, ports, nil
}

// publisher hands lists to update, dropping a list equal to the last one: successive pod watches
// each publish their first list, which is mostly the same engines.
type publisher struct {
	mu     sync.Mutex
	update func([]Endpoint)
	last   []Endpoint
	sent   bool
}

func (p *publisher) publish(eps []Endpoint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sent && equal(eps, p.last) {
		return
	}
	p.sent, p.last = true, eps
	p.update(eps)
}
