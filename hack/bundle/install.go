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

package main

import (
	"fmt"
	"slices"
	"strings"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// installParts is config/manifests sorted into what the CSV holds (the Deployments and the RBAC
// of their ServiceAccounts) and what the bundle carries as files.
type installParts struct {
	strategy operatorsv1alpha1.StrategyDetailsDeployment
	crds     []*apiextensionsv1.CustomResourceDefinition
	extra    []*unstructured.Unstructured
}

// bundleKinds are the kinds OLM installs from a bundle's manifests besides the CSV and CRDs.
var bundleKinds = map[string]bool{
	"ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
	"ConfigMap": true, "Secret": true, "Service": true, "ServiceAccount": true,
	"PrometheusRule": true, "ServiceMonitor": true, "PodDisruptionBudget": true, "PriorityClass": true,
	"VerticalPodAutoscaler": true, "ConsoleYAMLSample": true, "ConsoleQuickStart": true,
	"ConsoleCLIDownload": true, "ConsoleLink": true,
}

// splitInstall turns the objects of `kustomize build config/manifests` into the install strategy
// and the other bundle manifests:
//   - each Deployment becomes a CSV deployment; OLM creates its ServiceAccount;
//   - the rules of the Roles and ClusterRoles bound to those ServiceAccounts become CSV
//     permissions and clusterPermissions, and the bindings go away. A ClusterRole that a
//     ClusterRoleBinding grants is split by scope: its rules on namespaced resources become
//     permissions, which OLM grants in the OperatorGroup's target namespaces (cluster-wide, as a
//     ClusterRole, for AllNamespaces), so an operator installed for some namespaces holds no
//     more than it can use there; rules on cluster-scoped resources stay clusterPermissions;
//   - Namespaces are dropped (OLM installs into the OperatorGroup's namespace) and the namespace
//     of every other object with them;
//   - the rest (the metrics Service, the aggregated editor and viewer ClusterRoles) are files.
func splitInstall(objs []*unstructured.Unstructured) (*installParts, error) {
	p := &installParts{}
	roles := map[string]*unstructured.Unstructured{}
	var bindings, rest []*unstructured.Unstructured
	serviceAccounts := map[string]bool{}
	for _, o := range objs {
		switch o.GetKind() {
		case "CustomResourceDefinition":
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := fromUnstructured(o, crd); err != nil {
				return nil, err
			}
			p.crds = append(p.crds, crd)
		case "Deployment":
			d := &appsv1.Deployment{}
			if err := fromUnstructured(o, d); err != nil {
				return nil, err
			}
			sa := d.Spec.Template.Spec.ServiceAccountName
			if sa == "" {
				return nil, fmt.Errorf("deployment %s names no serviceAccountName: OLM grants the CSV's permissions to a named ServiceAccount", d.Name)
			}
			serviceAccounts[sa] = true
			p.strategy.DeploymentSpecs = append(p.strategy.DeploymentSpecs, operatorsv1alpha1.StrategyDeploymentSpec{
				Name: d.Name, Spec: d.Spec, Label: d.Labels,
			})
		case "Namespace":
		case "Role", "ClusterRole":
			roles[roleKey(o.GetKind(), o.GetNamespace(), o.GetName())] = o
		case "RoleBinding", "ClusterRoleBinding":
			bindings = append(bindings, o)
		default:
			rest = append(rest, o)
		}
	}
	if len(p.strategy.DeploymentSpecs) == 0 {
		return nil, fmt.Errorf("config/manifests has no Deployment to install")
	}
	scopes := crdScopes(p.crds)
	perms, clusterPerms := map[string][]rbacv1.PolicyRule{}, map[string][]rbacv1.PolicyRule{}
	bound := map[string]bool{}
	for _, b := range bindings {
		var binding rbacv1.RoleBinding // a ClusterRoleBinding has the same fields but a namespace
		if err := fromUnstructured(b, &binding); err != nil {
			return nil, err
		}
		sa, err := operatorSubject(b, binding.Subjects, serviceAccounts)
		if err != nil {
			return nil, err
		}
		if sa == "" {
			rest = append(rest, b)
			continue
		}
		key := roleKey(binding.RoleRef.Kind, b.GetNamespace(), binding.RoleRef.Name)
		role, ok := roles[key]
		if !ok {
			return nil, fmt.Errorf("%s %s grants %s %s, which config/manifests does not have", b.GetKind(), b.GetName(), binding.RoleRef.Kind, binding.RoleRef.Name)
		}
		bound[key] = true
		var r rbacv1.ClusterRole
		if err := fromUnstructured(role, &r); err != nil {
			return nil, err
		}
		if b.GetKind() == "RoleBinding" {
			perms[sa] = append(perms[sa], r.Rules...)
			continue
		}
		namespaced, cluster, err := splitRulesByScope(r.Rules, scopes)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", role.GetKind(), role.GetName(), err)
		}
		perms[sa] = append(perms[sa], namespaced...)
		clusterPerms[sa] = append(clusterPerms[sa], cluster...)
	}
	for _, key := range sortedKeys(roles) {
		if !bound[key] {
			rest = append(rest, roles[key])
		}
	}
	p.strategy.Permissions = permissionList(perms)
	p.strategy.ClusterPermissions = permissionList(clusterPerms)

	for _, o := range rest {
		if o.GetKind() == "ServiceAccount" && serviceAccounts[o.GetName()] {
			continue
		}
		if !bundleKinds[o.GetKind()] {
			return nil, fmt.Errorf("%s %s: OLM does not install this kind from a bundle", o.GetKind(), o.GetName())
		}
		o = o.DeepCopy()
		o.SetNamespace("")
		p.extra = append(p.extra, o)
	}
	return p, nil
}

// operatorSubject is the operator ServiceAccount a binding grants to, or "" for a binding of
// other subjects. A binding of both cannot be split into the CSV and is refused.
func operatorSubject(b *unstructured.Unstructured, subjects []rbacv1.Subject, serviceAccounts map[string]bool) (string, error) {
	var sa string
	for _, s := range subjects {
		if s.Kind == rbacv1.ServiceAccountKind && serviceAccounts[s.Name] {
			sa = s.Name
		}
	}
	if sa != "" && len(subjects) > 1 {
		return "", fmt.Errorf("%s %s binds the operator's ServiceAccount %s and other subjects: give each its own binding", b.GetKind(), b.GetName(), sa)
	}
	return sa, nil
}

func roleKey(kind, namespace, name string) string {
	if kind == "ClusterRole" {
		namespace = ""
	}
	return kind + "/" + namespace + "/" + name
}

func permissionList(m map[string][]rbacv1.PolicyRule) []operatorsv1alpha1.StrategyDeploymentPermissions {
	var out []operatorsv1alpha1.StrategyDeploymentPermissions
	for _, sa := range sortedKeys(m) {
		if len(m[sa]) > 0 {
			out = append(out, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: sa, Rules: m[sa]})
		}
	}
	return out
}

// Scopes of the resources an operator's RBAC may name, for the split between permissions and
// clusterPermissions. The operator's own CRDs carry their scope; a resource in neither table is
// an error, so that a new RBAC marker cannot silently land in the wrong list.
var (
	namespacedResources = map[string][]string{
		"":                            {"configmaps", "endpoints", "events", "limitranges", "persistentvolumeclaims", "pods", "podtemplates", "replicationcontrollers", "resourcequotas", "secrets", "serviceaccounts", "services"},
		"apps":                        {"controllerrevisions", "daemonsets", "deployments", "replicasets", "statefulsets"},
		"autoscaling":                 {"horizontalpodautoscalers"},
		"batch":                       {"cronjobs", "jobs"},
		"coordination.k8s.io":         {"leases"},
		"discovery.k8s.io":            {"endpointslices"},
		"events.k8s.io":               {"events"},
		"gateway.networking.k8s.io":   {"gateways", "grpcroutes", "httproutes", "referencegrants"},
		"inference.networking.k8s.io": {"inferencepools"},
		"keda.sh":                     {"scaledjobs", "scaledobjects", "triggerauthentications"},
		"leaderworkerset.x-k8s.io":    {"leaderworkersets"},
		"monitoring.coreos.com":       {"podmonitors", "prometheusrules", "servicemonitors"},
		"networking.k8s.io":           {"ingresses", "networkpolicies"},
		"policy":                      {"poddisruptionbudgets"},
		"rbac.authorization.k8s.io":   {"rolebindings", "roles"},
		"route.openshift.io":          {"routes"},
	}
	clusterResources = map[string][]string{
		"":                             {"namespaces", "nodes", "persistentvolumes"},
		"admissionregistration.k8s.io": {"mutatingwebhookconfigurations", "validatingadmissionpolicies", "validatingadmissionpolicybindings", "validatingwebhookconfigurations"},
		"apiextensions.k8s.io":         {"customresourcedefinitions"},
		"authentication.k8s.io":        {"tokenreviews"},
		"authorization.k8s.io":         {"selfsubjectaccessreviews", "subjectaccessreviews"},
		"gateway.networking.k8s.io":    {"gatewayclasses"},
		"node.k8s.io":                  {"runtimeclasses"},
		"rbac.authorization.k8s.io":    {"clusterrolebindings", "clusterroles"},
		"scheduling.k8s.io":            {"priorityclasses"},
		"security.openshift.io":        {"securitycontextconstraints"},
		"storage.k8s.io":               {"csidrivers", "csinodes", "storageclasses", "volumeattachments"},
	}
)

// crdScopes is whether each resource of the CRDs ("group/plural") is namespaced.
func crdScopes(crds []*apiextensionsv1.CustomResourceDefinition) map[string]bool {
	m := map[string]bool{}
	for _, c := range crds {
		m[c.Spec.Group+"/"+c.Spec.Names.Plural] = c.Spec.Scope == apiextensionsv1.NamespaceScoped
	}
	return m
}

// splitRulesByScope splits rules into those on namespaced resources and the rest (cluster-scoped
// resources, non-resource URLs). A rule over several groups is split into one rule per group and
// scope first.
func splitRulesByScope(rules []rbacv1.PolicyRule, crds map[string]bool) (namespaced, cluster []rbacv1.PolicyRule, err error) {
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			cluster = append(cluster, r)
			continue
		}
		for _, g := range r.APIGroups {
			var ns, cl []string
			for _, res := range r.Resources {
				isNS, err := namespacedResource(g, res, crds)
				if err != nil {
					return nil, nil, err
				}
				if isNS {
					ns = append(ns, res)
				} else {
					cl = append(cl, res)
				}
			}
			for _, part := range []struct {
				resources []string
				into      *[]rbacv1.PolicyRule
			}{{ns, &namespaced}, {cl, &cluster}} {
				if len(part.resources) > 0 {
					rule := *r.DeepCopy()
					rule.APIGroups, rule.Resources = []string{g}, part.resources
					*part.into = append(*part.into, rule)
				}
			}
		}
	}
	return namespaced, cluster, nil
}

func namespacedResource(group, resource string, crds map[string]bool) (bool, error) {
	base, _, _ := strings.Cut(resource, "/") // a subresource has its resource's scope
	if ns, ok := crds[group+"/"+base]; ok {
		return ns, nil
	}
	if slices.Contains(namespacedResources[group], base) {
		return true, nil
	}
	if slices.Contains(clusterResources[group], base) {
		return false, nil
	}
	return false, fmt.Errorf("hack/bundle does not know whether %q in API group %q is namespaced: add it to namespacedResources or clusterResources (hack/bundle/install.go)", base, group)
}

func fromUnstructured(o *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
