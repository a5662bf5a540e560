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
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Kubernetes discovers the engine pods of one KVRouter: the pods matching Selector in Namespace,
// through a shared informer (one watch, no polling). A pod is an endpoint once it has an IP; it
// is ready while its Ready condition is true and it is not being deleted, so a pod that a
// scale-down or rollout removes stops receiving new requests as soon as it starts terminating,
// while its in-flight streams finish.
type Kubernetes struct {
	Client    kubernetes.Interface
	Namespace string
	Selector  labels.Selector
	// Ports used when a pod's container does not name them (http, kv-events, kv-replay).
	HTTPPort, EventsPort, ReplayPort int
	// TargetPorts, when set, are the HTTP ports of the engines on every selected pod (an
	// InferencePool's targetPorts); they win over the pod's named http port and HTTPPort, because
	// the pool is what the gateway also routes by. With one port the endpoint is named after the
	// pod, as without TargetPorts. With several, each port is an engine of its own named
	// <pod>:<port>, and the i-th port's KV event and replay ports are those of the pod (named or
	// defaults) plus i. That offset is an assumption about how such pods are built: one vLLM
	// server per data-parallel rank, listed in rank order, and vLLM adds the rank to the port of
	// both ZMQ endpoints (kv-events-config endpoint and replay_endpoint).
	TargetPorts []int
	// DPRanks is the number of data-parallel ranks per pod (1: none).
	DPRanks int
	Log     logr.Logger
	// Debounce coalesces bursts of pod events (default 200 ms).
	Debounce time.Duration

	// badRoles remembers the pods whose RoleLabel value was unknown, so each is logged once.
	badRolesMu sync.Mutex
	badRoles   map[string]string
}

// Run implements Source.
func (k *Kubernetes) Run(ctx context.Context, update func([]Endpoint)) error {
	if k.Client == nil || k.Selector == nil || k.Namespace == "" {
		return fmt.Errorf("kubernetes discovery needs a client, a namespace and a selector")
	}
	factory := informers.NewSharedInformerFactoryWithOptions(k.Client, 0,
		informers.WithNamespace(k.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = k.Selector.String() }))
	inf := factory.Core().V1().Pods()
	changed, err := changes(inf.Informer())
	if err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("pod informer for %s in %s did not sync", k.Selector, k.Namespace)
	}
	debounce := k.Debounce
	if debounce <= 0 {
		debounce = 200 * time.Millisecond
	}
	var cur []Endpoint
	first := true
	publish := func() {
		pods, err := inf.Lister().Pods(k.Namespace).List(k.Selector)
		if err != nil {
			k.Log.Error(err, "listing engine pods")
			return
		}
		next := make([]Endpoint, 0, len(pods)*max(1, len(k.TargetPorts)))
		for _, p := range pods {
			next = append(next, k.endpoints(p)...)
		}
		sortEndpoints(next)
		if first || !equal(next, cur) {
			first = false
			cur = next
			update(cur)
		}
	}
	publish()
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			if timer == nil {
				timer = time.After(debounce)
			}
		case <-timer:
			timer = nil
			publish()
		}
	}
}

// endpoints turns a pod into its engines: none for a pod that has no IP yet or has finished, or
// that has no HTTP port; one per target port otherwise.
func (k *Kubernetes) endpoints(p *corev1.Pod) []Endpoint {
	if p.Status.PodIP == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil
	}
	httpPort, events, replay := k.HTTPPort, k.EventsPort, k.ReplayPort
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			switch cp.Name {
			case "http":
				httpPort = int(cp.ContainerPort)
			case "kv-events":
				events = int(cp.ContainerPort)
			case "kv-replay":
				replay = int(cp.ContainerPort)
			}
		}
	}
	ports := k.TargetPorts
	if len(ports) == 0 {
		if httpPort <= 0 {
			return nil
		}
		ports = []int{httpPort}
	}
	ip := p.Status.PodIP
	ready := p.DeletionTimestamp == nil && podReady(p)
	role := k.role(p)
	eps := make([]Endpoint, 0, len(ports))
	for i, port := range ports {
		e := Endpoint{
			Name:    p.Name,
			URL:     "http://" + net.JoinHostPort(ip, strconv.Itoa(port)),
			DPRanks: k.DPRanks,
			Ready:   ready,
			Role:    role,
		}
		if len(ports) > 1 {
			e.Name = p.Name + ":" + strconv.Itoa(port)
		}
		e.KVEvents = zmqEndpoint(ip, events, i)
		e.KVReplay = zmqEndpoint(ip, replay, i)
		eps = append(eps, e)
	}
	return eps
}

// role is the pod's pool from its RoleLabel. An unknown value is logged (once per pod and value)
// and the pod treated as having no role: it still serves whole requests, which is what any
// engine with the kv_both connector can do, rather than vanish from routing over a typo.
func (k *Kubernetes) role(p *corev1.Pod) string {
	v, ok := p.Labels[RoleLabel]
	if !ok || KnownRole(v) {
		return v
	}
	k.badRolesMu.Lock()
	if k.badRoles == nil {
		k.badRoles = map[string]string{}
	}
	seen := k.badRoles[p.Name] == v
	k.badRoles[p.Name] = v
	k.badRolesMu.Unlock()
	if !seen {
		k.Log.Info("engine pod has an unknown role label; treating it as an engine without a role",
			"pod", p.Name, "label", RoleLabel, "value", v, "want", RolePrefill+" or "+RoleDecode)
	}
	return ""
}

// zmqEndpoint is tcp://ip:port+offset, or empty when there is no port (the engine then gets no
// event subscription rather than one to a port that cannot exist).
func zmqEndpoint(ip string, port, offset int) string {
	if port <= 0 || port+offset > 65535 {
		return ""
	}
	return "tcp://" + net.JoinHostPort(ip, strconv.Itoa(port+offset))
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// changes is signalled (without blocking, at most one signal pending) on every change the
// informer sees: the caller debounces and rereads the whole set, so what changed does not matter.
func changes(inf cache.SharedIndexInformer) (<-chan struct{}, error) {
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	})
	return changed, err
}
