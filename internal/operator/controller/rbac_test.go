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

// Least privilege, checked against what the operator really does: every kube-apiserver of this
// suite writes an audit log of the requests the operator's user makes, and at the end of the
// suite every permission the operator's ClusterRole grants must have been used by one of them,
// or be needed in a way no request shows (neededWithoutRequest says which, and checks why).

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/rbacaudit"
)

const (
	// operatorUser holds exactly the operator's ClusterRole (see operatorConfig).
	operatorUser = "kvrouter-operator-under-test"
	// operatorUserAgent marks the requests of the operator under test, so that the test's own
	// requests with the same credentials (probes of what they may not do) are told apart.
	operatorUserAgent = "kvrouter-operator-under-test"
	// ownerRefsPlugin makes blockOwnerDeletion on an ownerReference require update on the
	// owner's finalizers subresource. OpenShift enables it; the suite does too, so that the
	// permission is exercised rather than assumed.
	ownerRefsPlugin = "OwnerReferencesPermissionEnforcement"
)

var (
	// operatorLog receives the log of every operator this suite runs.
	operatorLog = gbytes.NewBuffer()
	// auditDir holds the audit log of every control plane of the suite, read at its end.
	auditDir  string
	auditLogs []string
	// noWatchListLogs are the audit logs of control planes that serve no streaming watch-list.
	noWatchListLogs []string
	// adminConfig is a cluster admin's config of the suite's main control plane.
	adminConfig *rest.Config
	// ownerRefsEnforced is set by the spec that shows the API server refusing blockOwnerDeletion
	// to a user without kvrouters/finalizers update.
	ownerRefsEnforced bool
)

// auditControlPlane makes env's API server log the operator's requests and enforce owner
// references (ownerRefsPlugin). The suite's main control plane serves streaming watch-lists, as
// Kubernetes 1.34 and later do by default, so informers start with a watch alone; every further
// one (the bare cluster of missing_crds_test.go) serves none, as 1.33 and earlier do, so that the
// informers' list is exercised too. Call it before env.Start.
func auditControlPlane(env *envtest.Environment) {
	if auditDir == "" {
		d, err := os.MkdirTemp("", "kvrouter-audit-")
		Expect(err).NotTo(HaveOccurred())
		auditDir = d
	}
	dir, err := os.MkdirTemp(auditDir, "control-plane-")
	Expect(err).NotTo(HaveOccurred())
	path, err := rbacaudit.Enable(env, dir, operatorUser)
	Expect(err).NotTo(HaveOccurred())
	args := env.ControlPlane.GetAPIServer().Configure().Set("enable-admission-plugins", ownerRefsPlugin)
	if len(auditLogs) > 0 {
		args.Set("feature-gates", "WatchList=false")
		noWatchListLogs = append(noWatchListLogs, path)
	}
	auditLogs = append(auditLogs, path)
}

// operatorClusterRole is config/rbac/role.yaml, generated from the +kubebuilder:rbac markers.
func operatorClusterRole() *rbacv1.ClusterRole {
	data, err := os.ReadFile(filepath.Join(repoRoot(), "config", "rbac", "role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	Expect(yaml.Unmarshal(data, role)).To(Succeed())
	return role
}

var renderOpts = render.Options{RouterImage: "kvrouter:test", SimulatorImage: "kvrouter:test"}

// renderedKVRouters are KVRouters whose children cover every kind the renderer emits (the
// stray-children spec checks that they do).
func renderedKVRouters() []*v1alpha1.KVRouter {
	all := makeKVRouter("ns", "all").Gateway("chat.example.com").Autoscaling(1, 4).MultiNode(2, 8).Obj()
	all.Spec.Monitoring = &v1alpha1.MonitoringSpec{}
	pooled := makeKVRouter("ns", "pooled").Gateway("pool.example.com").InferencePool("").Obj()
	return []*v1alpha1.KVRouter{makeKVRouter("ns", "plain").Obj(), all, pooled}
}

// routerRoleRules are the rules of the router's Role as the operator renders it.
func routerRoleRules() []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	for _, kvr := range renderedKVRouters() {
		objs, err := render.Objects(kvr, renderOpts)
		Expect(err).NotTo(HaveOccurred())
		for _, o := range objs {
			if r, ok := o.(*rbacv1.Role); ok {
				rules = append(rules, r.Rules...)
			}
		}
	}
	Expect(rules).NotTo(BeEmpty(), "the renderer emits no Role")
	return rules
}

// rendersBlockOwnerDeletion reports whether every rendered child asks to block its owner's
// deletion, which is what makes ownerRefsPlugin check kvrouters/finalizers.
func rendersBlockOwnerDeletion() bool {
	for _, kvr := range renderedKVRouters() {
		objs, err := render.Objects(kvr, renderOpts)
		Expect(err).NotTo(HaveOccurred())
		for _, o := range objs {
			ref := metav1.GetControllerOf(o)
			if ref == nil || !ptr.Deref(ref.BlockOwnerDeletion, false) {
				return false
			}
		}
	}
	return true
}

var finalizersUpdate = rbacaudit.Permission{Group: v1alpha1.GroupVersion.Group, Resource: "kvrouters/finalizers", Verb: "update"}

// metricsReviews are what the manager's metrics endpoint creates to check each scraper, outside
// the controller this suite runs; cmd/manager's TestEnvtestManagerSecureMetrics audits that the
// manager uses both and is refused nothing.
var metricsReviews = map[rbacaudit.Permission]bool{
	{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"}:        true,
	{Group: "authorization.k8s.io", Resource: "subjectaccessreviews", Verb: "create"}: true,
}

// neededWithoutRequest says why the operator needs p although none of its requests uses it, and
// checks that the reason holds; ok is false when there is no such reason. used holds the
// permissions the operator's requests used, informersList whether its informers were seen to
// list on a control plane without watch-lists.
func neededWithoutRequest(p rbacaudit.Permission, used map[rbacaudit.Permission]bool, informersList bool) (why string, ok bool) {
	watch := p
	watch.Verb = "watch"
	switch {
	case p.Verb == "list" && used[watch] && informersList:
		return "the operator watches it, and its informers list where the API server serves no watch-list (Kubernetes 1.33 and earlier; shown by this suite's bare control plane)", true
	case rbacaudit.Grants(routerRoleRules(), p):
		return "the router's Role grants it, and the API server lets only a user who holds a permission grant it (RBAC escalation check)", true
	case metricsReviews[p]:
		return "the manager's metrics endpoint authenticates and authorizes each scraper with it (cmd/manager's TestEnvtestManagerSecureMetrics shows the requests)", true
	case p == finalizersUpdate && ownerRefsEnforced && rendersBlockOwnerDeletion():
		return "every child's ownerReference sets blockOwnerDeletion, which " + ownerRefsPlugin + " allows only with this permission (shown by a spec of this suite)", true
	}
	return "", false
}

// configYAMLFiles are the YAML files under config/ (kustomize inputs, samples and CRDs included).
func configYAMLFiles() []string {
	var files []string
	Expect(filepath.WalkDir(filepath.Join(repoRoot(), "config"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return err
	})).To(Succeed())
	return files
}

// rolesUnder reads every Role and ClusterRole from the YAML documents of files.
func rolesUnder(files []string) map[string][]rbacv1.PolicyRule {
	roles := map[string][]rbacv1.PolicyRule{}
	for _, path := range files {
		data, err := os.ReadFile(path)
		Expect(err).NotTo(HaveOccurred())
		docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := docs.Read()
			if err != nil {
				break
			}
			var head struct{ Kind string }
			if yaml.Unmarshal(doc, &head) != nil || (head.Kind != "Role" && head.Kind != "ClusterRole") {
				continue
			}
			var r rbacv1.ClusterRole // a Role has the same rules field
			Expect(yaml.Unmarshal(doc, &r)).To(Succeed(), path)
			rel, _ := filepath.Rel(repoRoot(), path)
			roles[rel+": "+head.Kind+" "+r.Name] = r.Rules
		}
	}
	return roles
}

var _ = Describe("The operator's RBAC", func() {
	ctx := context.Background()

	It("has no wildcard and no Secret access in any Role or ClusterRole under config/, nor in the router's Role", func() {
		roles := rolesUnder(configYAMLFiles())
		Expect(roles).To(HaveKey(ContainSubstring("ClusterRole kvrouter-manager")), "the operator's ClusterRole was not found under config/")
		roles["rendered router Role"] = routerRoleRules()
		for name, rules := range roles {
			Expect(rbacaudit.Wildcards(rules)).To(BeEmpty(), "%s", name)
			for _, p := range rbacaudit.Granted(rules) {
				Expect(p.Resource).NotTo(Equal("secrets"), "%s grants %s", name, p)
			}
		}
	})

	It("holds every permission it grants the router, which the API server requires of whoever creates that Role", func() {
		role := operatorClusterRole()
		for _, p := range rbacaudit.Granted(routerRoleRules()) {
			Expect(rbacaudit.Grants(role.Rules, p)).To(BeTrue(), "the router's Role grants %s, which the operator's ClusterRole lacks", p)
		}
	})

	It("needs kvrouters/finalizers update: the API server refuses blockOwnerDeletion to a user without it", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "owner").Simulate().Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())

		role := operatorClusterRole()
		const user = "kvrouter-operator-without-finalizers"
		without := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}}
		for _, r := range role.Rules {
			r.Resources = slices.DeleteFunc(slices.Clone(r.Resources), func(res string) bool { return res == "kvrouters/finalizers" })
			if len(r.Resources) > 0 {
				without.Rules = append(without.Rules, r)
			}
		}
		Expect(k8sClient.Create(ctx, without)).To(Succeed())
		Expect(k8sClient.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		})).To(Succeed())

		owned := func(name string) *corev1.ServiceAccount {
			return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "KVRouter",
					Name: kvr.Name, UID: kvr.UID, BlockOwnerDeletion: ptr.To(true)}}}}
		}
		err := impersonating(user).Create(ctx, owned("probe"))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "creating a child that blocks its owner's deletion without kvrouters/finalizers update: %v", err)
		Expect(err.Error()).To(ContainSubstring("blockOwnerDeletion"))
		Expect(impersonating(operatorUser).Create(ctx, owned("probe"))).To(Succeed(), "the same create with the operator's ClusterRole")
		ownerRefsEnforced = true
	})

	It("deletes a stray child of every kind it renders", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "sweep").Simulate().Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(reload(g, k8sClient, kvr).Status.ObservedGeneration).To(BeNumerically(">", 0))
		}).Should(Succeed())

		// What an older operator version may have left: objects of every rendered kind, under
		// names the current spec does not render, controlled by the KVRouter.
		var strays []client.Object
		for _, tmpl := range renderedKVRouters() {
			tmpl.Namespace, tmpl.Name = ns, "old-"+tmpl.Name
			objs, err := render.Objects(tmpl, renderOpts)
			Expect(err).NotTo(HaveOccurred())
			for _, o := range objs {
				u, err := toApplyObject(o, k8sClient.Scheme())
				Expect(err).NotTo(HaveOccurred())
				if _, err := k8sClient.RESTMapper().RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version); meta.IsNoMatchError(err) {
					continue // an optional kind whose CRD this control plane lacks
				}
				u.SetName(u.GetName() + "-stale")
				u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "KVRouter",
					Name: kvr.Name, UID: kvr.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}})
				labels := u.GetLabels()
				labels[render.LabelKVRouter] = kvr.Name
				u.SetLabels(labels)
				Expect(k8sClient.Create(ctx, u)).To(Succeed(), "%s %s", u.GetKind(), u.GetName())
				strays = append(strays, u)
			}
		}
		kinds := map[schema.GroupVersionKind]bool{}
		for _, s := range strays {
			kinds[s.GetObjectKind().GroupVersionKind()] = true
		}
		for _, gvk := range coreChildKinds {
			Expect(kinds).To(HaveKey(gvk), "no rendered KVRouter has a %s: extend renderedKVRouters", gvk.Kind)
		}
		for _, k := range OptionalKinds {
			Expect(kinds).To(HaveKey(k.GVK), "no rendered KVRouter has a %s: extend renderedKVRouters", k.GVK.Kind)
		}
		Eventually(func(g Gomega) {
			for _, s := range strays {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(s.GetObjectKind().GroupVersionKind())
				err := k8sClient.Get(ctx, client.ObjectKeyFromObject(s), u)
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s %s: %v", u.GetKind(), s.GetName(), err)
			}
		}).Should(Succeed())
	})

	It("records a failure that persists across retries as one Event with a series, not an Event per retry", func() {
		ns := newNamespace(k8sClient)
		denyServices(k8sClient, ns)
		kvr := makeKVRouter(ns, "retrying").Simulate().Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())
		// The recorder sends an Event the first time and patches its series when the same Event
		// (same KVRouter resourceVersion, reason and note) recurs: from the third failed
		// reconcile on, since the first one's status write moves the resourceVersion.
		Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, list, client.InNamespace(ns))).To(Succeed())
			series := slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
				return e.Reason == EventApplyFailed && e.Series != nil && e.Series.Count >= 2
			})
			g.Expect(series).To(BeTrue(), "no ApplyFailed Event with a series among %d Events", len(list.Items))
		}).Should(Succeed())
	})

	It("passes the Hugging Face token and the API keys by reference and never reads or logs them", func() {
		ns := newNamespace(k8sClient)
		const hfToken, apiKey = "hf_never-in-the-operator-log-6f1c2b", "sk-never-in-the-operator-log-0a7d"
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hf"},
			StringData: map[string]string{"token": hfToken}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys"},
			StringData: map[string]string{"api-key": apiKey}})).To(Succeed())
		kvr := makeKVRouter(ns, "secretive").Obj()
		kvr.Spec.Model.HFTokenSecret = "hf"
		kvr.Spec.Router.APIKeySecret = &v1alpha1.SecretKeyRef{Name: "keys"}
		kvr.Spec.Engine.APIKeySecret = &v1alpha1.SecretKeyRef{Name: "keys"}
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())
		ref := func(name, key string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
		}
		Eventually(func(g Gomega) {
			engine := child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &appsv1.Deployment{})
			g.Expect(engine.Spec.Template.Spec.Containers[0].Env).To(ContainElements(
				corev1.EnvVar{Name: "HF_TOKEN", ValueFrom: ref("hf", "token")},
				corev1.EnvVar{Name: render.EngineAPIKeyEnv, ValueFrom: ref("keys", render.DefaultAPIKeySecretKey)}))
			router := child(g, k8sClient, kvr, render.RouterName(kvr), &appsv1.Deployment{})
			g.Expect(router.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("Secret.SecretName", "keys")))
			g.Expect(reload(g, k8sClient, kvr).Status.ObservedGeneration).To(Equal(kvr.Generation))
		}).Should(Succeed())
		Expect(string(operatorLog.Contents())).NotTo(ContainSubstring(hfToken))
		Expect(string(operatorLog.Contents())).NotTo(ContainSubstring(apiKey))
		// The audit at the end of the suite checks that no request of the operator touched a Secret.
	})
})

// denyServices makes the API server refuse every Service created in ns, and so every apply of a
// router Service there: a quota of zero Services. envtest runs no quota controller, so the
// quota's status is written by hand. Deleting the returned quota lifts it.
func denyServices(c client.Client, ns string) *corev1.ResourceQuota {
	GinkgoHelper()
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-services"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceServices: resource.MustParse("0")}},
	}
	Expect(c.Create(context.Background(), quota)).To(Succeed())
	modifyStatus(c, quota, func(q *corev1.ResourceQuota) {
		q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourceServices: resource.MustParse("0")}}
	})
	return quota
}

// impersonating returns a client of the main control plane that acts as user.
func impersonating(user string) client.Client {
	cfg := rest.CopyConfig(adminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return newClient(cfg)
}

var _ = ReportAfterSuite("the operator's requests over the whole suite, against its ClusterRole", func(report Report) {
	if auditDir == "" {
		return // the suite did not start a control plane
	}
	defer os.RemoveAll(auditDir)
	reqs, err := rbacaudit.Read(auditLogs...)
	Expect(err).NotTo(HaveOccurred())
	isOperator := func(r rbacaudit.Request) bool { return r.User == operatorUser && r.UserAgent == operatorUserAgent }
	var refused, secrets []string
	n := 0
	for _, r := range reqs {
		if !isOperator(r) {
			continue
		}
		n++
		if r.Resource == "secrets" || strings.HasPrefix(r.Resource, "secrets/") {
			secrets = append(secrets, r.Permission.String()+" "+r.Namespace+"/"+r.Name)
		}
	}
	for _, r := range rbacaudit.Refused(reqs, isOperator) {
		refused = append(refused, r.Permission.String()+" "+r.Namespace+"/"+r.Name)
	}
	Expect(n).To(BeNumerically(">", 0), "the audit logs hold no request of the operator: is auditing on?")
	Expect(secrets).To(BeEmpty(), "the operator must never touch a Secret")
	Expect(refused).To(BeEmpty(), "the API server refused these requests of the operator: its ClusterRole lacks them (add +kubebuilder:rbac markers and run make manifests)")

	used := rbacaudit.Used(reqs, isOperator)
	noWatchList, err := rbacaudit.Read(noWatchListLogs...)
	Expect(err).NotTo(HaveOccurred())
	informersList := rbacaudit.Used(noWatchList, isOperator)[rbacaudit.Permission{Group: v1alpha1.GroupVersion.Group, Resource: "kvrouters", Verb: "list"}]
	var unused []string
	for _, p := range rbacaudit.Unused(operatorClusterRole().Rules, used) {
		if why, ok := neededWithoutRequest(p, used, informersList); ok {
			GinkgoWriter.Printf("%s: no request uses it; needed because %s\n", p, why)
			continue
		}
		unused = append(unused, p.String())
	}
	// Permissions are only known to be unused when every spec ran and passed.
	complete := report.PreRunStats.SpecsThatWillRun == report.PreRunStats.TotalSpecs
	for _, s := range report.SpecReports {
		complete = complete && !s.State.Is(types.SpecStateFailureStates)
	}
	if !complete {
		GinkgoWriter.Printf("not every spec ran and passed: not checking for unused permissions (unused so far: %v)\n", unused)
		return
	}
	Expect(unused).To(BeEmpty(), "the operator's ClusterRole grants permissions no request of the whole suite used: "+
		"remove them from the +kubebuilder:rbac markers (make manifests), or give the reason in neededWithoutRequest")
})
