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
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/blang/semver/v4"
	scorecardv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	"github.com/operator-framework/api/pkg/lib/version"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/hack/internal/gen"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// pkgConfig is config/manifests/package.yaml.
type pkgConfig struct {
	Package           string   `json:"package"`
	Channels          []string `json:"channels"`
	DefaultChannel    string   `json:"defaultChannel"`
	OpenShiftVersions string   `json:"openshiftVersions"`
}

// files is the generator's output: contents by path relative to the repository root.
type files map[string][]byte

const (
	bundleDir      = "bundle"
	bundleDocker   = "bundle.Dockerfile"
	disconnectedFA = "features.operators.openshift.io/disconnected"
	relatedPrefix  = "RELATED_IMAGE_"
)

// generate reads the kustomize tree configDir (the repository's config/) and returns the bundle.
// version, when not empty, replaces spec.version of the CSV base. The output depends on nothing
// but the inputs: no timestamps, every list sorted or in input order.
func generate(configDir, csvVersion string) (files, error) {
	manifestsDir := filepath.Join(configDir, "manifests")
	var pkg pkgConfig
	if err := readStrict(filepath.Join(manifestsDir, "package.yaml"), &pkg); err != nil {
		return nil, err
	}
	if pkg.Package == "" || len(pkg.Channels) == 0 || !slices.Contains(pkg.Channels, pkg.DefaultChannel) {
		return nil, fmt.Errorf("%s: package, channels and a defaultChannel among the channels are required", filepath.Join(manifestsDir, "package.yaml"))
	}
	var csv operatorsv1alpha1.ClusterServiceVersion
	basePath := filepath.Join(manifestsDir, "bases", pkg.Package+".clusterserviceversion.yaml")
	if err := readStrict(basePath, &csv); err != nil {
		return nil, err
	}
	if csvVersion != "" {
		v, err := semver.Parse(strings.TrimPrefix(csvVersion, "v"))
		if err != nil {
			return nil, fmt.Errorf("version %q: %w", csvVersion, err)
		}
		csv.Spec.Version = version.OperatorVersion{Version: v}
	}
	up, err := readReleases(manifestsDir, pkg.Package, csv.Spec.Version.Version)
	if err != nil {
		return nil, err
	}
	icon, err := os.ReadFile(filepath.Join(manifestsDir, "icon.svg"))
	if err != nil {
		return nil, err
	}
	var scorecard scorecardv1alpha3.Configuration
	if err := readStrict(filepath.Join(configDir, "scorecard", "config.yaml"), &scorecard); err != nil {
		return nil, err
	}

	objs, err := gen.KustomizeBuild(manifestsDir)
	if err != nil {
		return nil, err
	}
	inst, err := splitInstall(objs)
	if err != nil {
		return nil, err
	}
	samples, err := gen.KustomizeBuild(filepath.Join(configDir, "samples"))
	if err != nil {
		return nil, err
	}

	csv.Name = pkg.Package + ".v" + csv.Spec.Version.String()
	csv.Spec.Icon = []operatorsv1alpha1.Icon{{Data: base64.StdEncoding.EncodeToString(icon), MediaType: "image/svg+xml"}}
	csv.Spec.InstallStrategy = operatorsv1alpha1.NamedInstallStrategy{
		StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment,
		StrategySpec: inst.strategy,
	}
	examples, resources, err := almExamples(samples)
	if err != nil {
		return nil, err
	}
	if csv.Spec.CustomResourceDefinitions.Owned, err = ownedCRDs(csv.Spec.CustomResourceDefinitions.Owned, inst.crds, resources); err != nil {
		return nil, fmt.Errorf("%s: %w", basePath, err)
	}
	if csv.Spec.RelatedImages, err = relatedImages(inst.strategy.DeploymentSpecs); err != nil {
		return nil, err
	}
	if csv.Annotations == nil {
		csv.Annotations = map[string]string{}
	}
	csv.Annotations["alm-examples"] = examples
	csv.Annotations["containerImage"] = inst.strategy.DeploymentSpecs[0].Spec.Template.Spec.Containers[0].Image
	csv.Annotations["createdAt"] = up.createdAt
	csv.Spec.Replaces = up.replaces
	if up.skipRange != "" {
		csv.Annotations["olm.skipRange"] = up.skipRange
	}
	if csv.Annotations[disconnectedFA] == "true" {
		for _, ri := range csv.Spec.RelatedImages {
			if !strings.Contains(ri.Image, "@sha256:") {
				return nil, fmt.Errorf("%s: %s is \"true\" but related image %s is %s, not a digest: pin every image by digest first (docs/openshift.md)", basePath, disconnectedFA, ri.Name, ri.Image)
			}
		}
	}

	out := files{}
	csvYAML, err := toYAML(&csv, "spec.apiservicedefinitions", "spec.cleanup")
	if err != nil {
		return nil, err
	}
	out[filepath.Join(bundleDir, "manifests", pkg.Package+".clusterserviceversion.yaml")] = csvYAML
	for _, crd := range inst.crds {
		b, err := toYAML(crd)
		if err != nil {
			return nil, err
		}
		out[filepath.Join(bundleDir, "manifests", crd.Spec.Group+"_"+crd.Spec.Names.Plural+".yaml")] = b
	}
	for _, o := range inst.extra {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		out[filepath.Join(bundleDir, "manifests", manifestFileName(o))] = b
	}
	annotations := bundleAnnotations(pkg)
	b, err := yaml.Marshal(map[string]any{"annotations": annotations})
	if err != nil {
		return nil, err
	}
	out[filepath.Join(bundleDir, "metadata", "annotations.yaml")] = b
	if b, err = yaml.Marshal(&scorecard); err != nil {
		return nil, err
	}
	out[filepath.Join(bundleDir, "tests", "scorecard", "config.yaml")] = b
	out[bundleDocker] = bundleDockerfile(annotations, imageLabels(csv, up))
	return out, nil
}

// readStrict reads a YAML file into v, refusing fields v does not have.
func readStrict(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// almExamples turns the samples into the alm-examples annotation (without their namespaces: the
// console creates them where the user is) and renders each one, which gives the kinds a
// KVRouter creates for the owned CRD's resources.
func almExamples(samples []*unstructured.Unstructured) (string, []operatorsv1alpha1.APIResourceReference, error) {
	var examples []map[string]any
	kinds := map[string]operatorsv1alpha1.APIResourceReference{}
	for _, s := range samples {
		raw, err := json.Marshal(s.Object)
		if err != nil {
			return "", nil, err
		}
		var kvr v1alpha1.KVRouter
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&kvr); err != nil {
			return "", nil, fmt.Errorf("sample %s %q: %w", s.GetKind(), s.GetName(), err)
		}
		if kvr.GroupVersionKind() != v1alpha1.GroupVersion.WithKind("KVRouter") {
			return "", nil, fmt.Errorf("sample %s %q is not a KVRouter of %s", s.GetKind(), s.GetName(), v1alpha1.GroupVersion)
		}
		if kvr.Namespace == "" {
			kvr.Namespace = "default"
		}
		objs, err := render.Objects(&kvr, render.Options{})
		if err != nil {
			return "", nil, fmt.Errorf("rendering sample %q: %w", s.GetName(), err)
		}
		for _, o := range objs {
			gvk := o.GetObjectKind().GroupVersionKind()
			if gvk.Kind == "" {
				return "", nil, fmt.Errorf("rendering sample %q: a %T without apiVersion and kind", s.GetName(), o)
			}
			ref := operatorsv1alpha1.APIResourceReference{Kind: gvk.Kind, Version: gvk.Version}
			if !builtinGroups[gvk.Group] {
				ref.Name = pluralOf(gvk.Kind)
			}
			kinds[gvk.Kind+"/"+gvk.Version] = ref
		}
		ex := s.DeepCopy()
		unstructured.RemoveNestedField(ex.Object, "metadata", "namespace")
		examples = append(examples, ex.Object)
	}
	if len(examples) == 0 {
		return "", nil, fmt.Errorf("config/samples has no KVRouter for alm-examples")
	}
	b, err := json.MarshalIndent(examples, "", "  ")
	if err != nil {
		return "", nil, err
	}
	var refs []operatorsv1alpha1.APIResourceReference
	for _, r := range kinds {
		refs = append(refs, r)
	}
	return string(b), mergeResources(refs), nil
}

// builtinGroups are the API groups of the kinds the renderer creates that come with Kubernetes:
// their resources carry no plural name in the CSV (OLM's APIResourceReference).
var builtinGroups = map[string]bool{"": true, "apps": true, "policy": true, "networking.k8s.io": true, "rbac.authorization.k8s.io": true, "autoscaling": true}

// pluralOf is the resource name of a custom kind, as the CRDs of the renderer's kinds spell it.
func pluralOf(kind string) string {
	k := strings.ToLower(kind)
	if strings.HasSuffix(k, "y") {
		return strings.TrimSuffix(k, "y") + "ies"
	}
	return k + "s"
}

// ownedCRDs completes the CSV base's owned CRDs from the CRDs themselves: version, kind, the
// description of the schema, the resources (for KVRouter, what rendering its samples created,
// with those the base lists for fields no sample sets) and
// a descriptor for every spec and status field. Every CRD of the bundle must be in the base (it
// gives the display name) and every CRD of the base in the bundle.
func ownedCRDs(base []operatorsv1alpha1.CRDDescription, crds []*apiextensionsv1.CustomResourceDefinition, kvrouterResources []operatorsv1alpha1.APIResourceReference) ([]operatorsv1alpha1.CRDDescription, error) {
	byName := map[string]operatorsv1alpha1.CRDDescription{}
	for _, b := range base {
		byName[b.Name] = b
	}
	var out []operatorsv1alpha1.CRDDescription
	for _, crd := range crds {
		b, ok := byName[crd.Name]
		if !ok {
			return nil, fmt.Errorf("CRD %s is not among spec.customresourcedefinitions.owned (add it with a displayName)", crd.Name)
		}
		delete(byName, crd.Name)
		if b.DisplayName == "" {
			return nil, fmt.Errorf("owned CRD %s has no displayName", crd.Name)
		}
		v, err := storageVersion(crd)
		if err != nil {
			return nil, err
		}
		root := v.Schema.OpenAPIV3Schema
		d := b
		d.Version, d.Kind = v.Name, crd.Spec.Names.Kind
		if d.Description == "" {
			d.Description = firstParagraph(root.Description)
		}
		if crd.Spec.Names.Kind == "KVRouter" {
			d.Resources = mergeResources(b.Resources, kvrouterResources)
		}
		if len(d.Resources) == 0 {
			return nil, fmt.Errorf("owned CRD %s lists no resources", crd.Name)
		}
		for _, part := range []string{"spec", "status"} {
			sub, ok := root.Properties[part]
			if !ok {
				continue
			}
			if part == "spec" {
				ds, err := deriveDescriptors(&sub, b.SpecDescriptors, true)
				if err != nil {
					return nil, fmt.Errorf("owned CRD %s specDescriptors: %w", crd.Name, err)
				}
				d.SpecDescriptors = ds
				continue
			}
			ds, err := deriveDescriptors(&sub, asSpec(b.StatusDescriptors), false)
			if err != nil {
				return nil, fmt.Errorf("owned CRD %s statusDescriptors: %w", crd.Name, err)
			}
			d.StatusDescriptors = asStatus(ds)
		}
		out = append(out, d)
	}
	for name := range byName {
		return nil, fmt.Errorf("spec.customresourcedefinitions.owned names %s, which config/crd does not have", name)
	}
	return out, nil
}

// mergeResources is the union of resource lists, sorted by kind and version.
func mergeResources(lists ...[]operatorsv1alpha1.APIResourceReference) []operatorsv1alpha1.APIResourceReference {
	byKey := map[string]operatorsv1alpha1.APIResourceReference{}
	for _, l := range lists {
		for _, r := range l {
			byKey[r.Kind+"/"+r.Version] = r
		}
	}
	out := make([]operatorsv1alpha1.APIResourceReference, 0, len(byKey))
	for _, k := range sortedKeys(byKey) {
		out = append(out, byKey[k])
	}
	return out
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensionsv1.CustomResourceDefinitionVersion, error) {
	for i := range crd.Spec.Versions {
		if v := &crd.Spec.Versions[i]; v.Storage {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				return nil, fmt.Errorf("CRD %s version %s has no schema", crd.Name, v.Name)
			}
			return v, nil
		}
	}
	return nil, fmt.Errorf("CRD %s has no storage version", crd.Name)
}

// relatedImages lists every image the operator runs or deploys by default: each container's
// image (named after the container) and each RELATED_IMAGE_<NAME> variable (named <name>), vLLM's
// included (RELATED_IMAGE_ENGINE: the CRD has no image default, the manager holds it). Sorted by
// name.
func relatedImages(deployments []operatorsv1alpha1.StrategyDeploymentSpec) ([]operatorsv1alpha1.RelatedImage, error) {
	images := map[string]string{}
	add := func(name, image, from string) error {
		if image == "" {
			return fmt.Errorf("%s: empty image", from)
		}
		if prev, ok := images[name]; ok && prev != image {
			return fmt.Errorf("related image %q is both %s and %s (%s)", name, prev, image, from)
		}
		images[name] = image
		return nil
	}
	for _, d := range deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if err := add(c.Name, c.Image, "Deployment "+d.Name+" container "+c.Name); err != nil {
				return nil, err
			}
			for _, e := range c.Env {
				if name, ok := strings.CutPrefix(e.Name, relatedPrefix); ok {
					if err := add(strings.ToLower(name), e.Value, "Deployment "+d.Name+" env "+e.Name); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	out := make([]operatorsv1alpha1.RelatedImage, 0, len(images))
	for _, n := range sortedKeys(images) {
		out = append(out, operatorsv1alpha1.RelatedImage{Name: n, Image: images[n]})
	}
	return out, nil
}

func bundleAnnotations(pkg pkgConfig) map[string]string {
	a := map[string]string{
		"operators.operatorframework.io.bundle.mediatype.v1":       "registry+v1",
		"operators.operatorframework.io.bundle.manifests.v1":       "manifests/",
		"operators.operatorframework.io.bundle.metadata.v1":        "metadata/",
		"operators.operatorframework.io.bundle.package.v1":         pkg.Package,
		"operators.operatorframework.io.bundle.channels.v1":        strings.Join(pkg.Channels, ","),
		"operators.operatorframework.io.bundle.channel.default.v1": pkg.DefaultChannel,
		"operators.operatorframework.io.test.mediatype.v1":         "scorecard+v1",
		"operators.operatorframework.io.test.config.v1":            "tests/scorecard/",
	}
	if pkg.OpenShiftVersions != "" {
		a["com.redhat.openshift.versions"] = pkg.OpenShiftVersions
	}
	return a
}

// imageLabels are the bundle image's OCI labels that the generator knows: all but the
// revision, which is the commit the image is built from (bundle.Dockerfile's REVISION build
// argument, passed by `make bundle-build`).
func imageLabels(csv operatorsv1alpha1.ClusterServiceVersion, up upgrade) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       csv.Name + " bundle",
		"org.opencontainers.image.description": "OLM bundle of the kvrouter operator: " + csv.Annotations["description"],
		"org.opencontainers.image.source":      csv.Annotations["repository"],
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     csv.Spec.Version.String(),
		"org.opencontainers.image.created":     up.createdAt,
	}
}

// bundleDockerfile builds the bundle image: the bundle's files, its annotations as labels, and
// the OCI labels.
func bundleDockerfile(annotations, oci map[string]string) []byte {
	var b strings.Builder
	b.WriteString("# The OLM bundle image. Generated by `make bundle` (hack/bundle) from config/manifests: do not\n# edit. Build it with `make bundle-build`.\nFROM scratch\n\n")
	for _, k := range sortedKeys(annotations) {
		fmt.Fprintf(&b, "LABEL %s=%s\n", k, annotations[k])
	}
	b.WriteString("\n# OCI labels: the release's (config/manifests/releases.yaml), and the commit built from.\nARG REVISION=unknown\n")
	for _, k := range sortedKeys(oci) {
		fmt.Fprintf(&b, "LABEL %s=%s\n", k, strconv.Quote(oci[k]))
	}
	b.WriteString("LABEL org.opencontainers.image.revision=$REVISION\n")
	b.WriteString("\nCOPY bundle/manifests /manifests/\nCOPY bundle/metadata /metadata/\nCOPY bundle/tests/scorecard /tests/scorecard/\n")
	return []byte(b.String())
}

// manifestFileName names an extra bundle manifest as operator-sdk does:
// <name>_<group>_<version>_<kind>.yaml, without the group for the core API.
func manifestFileName(o *unstructured.Unstructured) string {
	gvk := o.GroupVersionKind()
	parts := []string{o.GetName()}
	if gvk.Group != "" {
		parts = append(parts, gvk.Group)
	}
	parts = append(parts, gvk.Version, gvk.Kind)
	return strings.ToLower(strings.Join(parts, "_")) + ".yaml"
}

// toYAML serializes a typed object as the manifests are written: without status and null
// creation timestamps (render.ToUnstructured), keys sorted. The fields at emptyPaths are left out
// when they hold nothing but zero values (the CSV type writes "cleanup: {enabled: false}").
func toYAML(obj client.Object, emptyPaths ...string) ([]byte, error) {
	u, err := render.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	for _, p := range emptyPaths {
		fields := strings.Split(p, ".")
		if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, fields...); ok && zeroValue(v) {
			unstructured.RemoveNestedField(u.Object, fields...)
		}
	}
	return yaml.Marshal(u.Object)
}

func zeroValue(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		for _, c := range t {
			if !zeroValue(c) {
				return false
			}
		}
		return true
	case []any:
		return len(t) == 0
	case nil:
		return true
	case bool:
		return !t
	case string:
		return t == ""
	}
	return false
}
