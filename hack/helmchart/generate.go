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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"github.com/blang/semver/v4"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/hack/internal/gen"
)

const (
	chartName        = "kvrouter"
	relatedPrefix    = "RELATED_IMAGE_"
	managedByLabel   = "app.kubernetes.io/managed-by"
	managerContainer = "manager"
	leaderElectArg   = "--leader-elect"
	watchEnv         = "WATCH_NAMESPACE"
	// Quoted: a namespace such as "123" or "yes" is valid and YAML would read it as a number
	// or a boolean.
	releaseNamespace = "{{ .Release.Namespace | quote }}"
)

// chartValues are the defaults that values.yaml gets from config/, so that the default values
// render what config/default holds.
type chartValues struct {
	replicas  any
	images    []imageValue
	resources any
	// monitoring is one switch per kind of config/prometheus (camel-cased kind, "serviceMonitor").
	monitoring []monitoringKind
}

type imageValue struct {
	key, env                    string // env is the RELATED_IMAGE_* variable; empty for the manager
	repository, tag, digest, of string
}

type monitoringKind struct {
	key, kind string
	names     []string
}

// generate reads the kustomize tree configDir and returns the chart's files by path.
func generate(configDir, version string) (map[string][]byte, error) {
	meta, err := readCSVBase(configDir, version)
	if err != nil {
		return nil, err
	}
	def, err := kustomizeBuild(filepath.Join(configDir, "default"))
	if err != nil {
		return nil, err
	}
	prom, err := kustomizeBuild(filepath.Join(configDir, "prometheus"))
	if err != nil {
		return nil, err
	}
	graf, err := kustomizeBuild(filepath.Join(configDir, "grafana"))
	if err != nil {
		return nil, err
	}

	files := map[string][]byte{}
	ns, err := installNamespace(def)
	if err != nil {
		return nil, err
	}
	vals := &chartValues{}
	var managers int
	for _, o := range def {
		kind := o["kind"]
		switch kind {
		case "Namespace":
			// Helm installs into the release namespace (helm install -n NS --create-namespace).
			continue
		case "CustomResourceDefinition":
			// crds/ is installed as it is, before the templates, and never templated: the CRD
			// keeps kustomize's labels but for managed-by, which Helm does not do for it either.
			delete(nestedMap(o, "metadata", "labels"), managedByLabel)
			b, err := yaml.Marshal(o)
			if err != nil {
				return nil, err
			}
			files[filepath.Join("crds", name(o)+".yaml")] = b
			continue
		}
		t := &templater{}
		if err := common(t, o, ns, ""); err != nil {
			return nil, err
		}
		header := ""
		switch {
		case kind == "Deployment":
			managers++
			if err := templateManager(t, o, vals); err != nil {
				return nil, err
			}
			header = `{{- include "kvrouter.validate" . }}` + "\n"
		case kind == "ServiceAccount":
			t.addBlock(nestedMap(o, "metadata"), "{{- with .Values.serviceAccount.annotations }}\nannotations:\n  {{- toYaml . | nindent +2 }}\n{{- end }}")
		}
		if err := addTemplate(files, t, o, header, ""); err != nil {
			return nil, err
		}
	}
	if managers != 1 {
		return nil, fmt.Errorf("%s: want one Deployment (the manager), found %d", filepath.Join(configDir, "default"), managers)
	}

	kinds := map[string]*monitoringKind{}
	for _, o := range prom {
		kind, _ := o["kind"].(string)
		mk, ok := kinds[kind]
		if !ok {
			mk = &monitoringKind{key: lowerFirst(kind), kind: kind}
			kinds[kind] = mk
		}
		mk.names = append(mk.names, name(o))
		t := &templater{}
		v := ".Values.monitoring." + mk.key
		if err := common(t, o, ns, v+".labels"); err != nil {
			return nil, err
		}
		if err := addTemplate(files, t, o, "", v+".enabled"); err != nil {
			return nil, err
		}
	}
	for _, k := range sortedKeys(kinds) {
		if kinds[k].key == "dashboard" {
			return nil, fmt.Errorf("%s: kind %s would take the value monitoring.dashboard of config/grafana", filepath.Join(configDir, "prometheus"), k)
		}
		vals.monitoring = append(vals.monitoring, *kinds[k])
	}

	for _, o := range graf {
		t := &templater{}
		if err := common(t, o, ns, ".Values.monitoring.dashboard.labels"); err != nil {
			return nil, err
		}
		if nested(o, "metadata", "namespace") != nil {
			nestedMap(o, "metadata")["namespace"] = t.expr("{{ .Values.monitoring.dashboard.namespace | default .Release.Namespace | quote }}")
		}
		// The dashboard JSON is full of Grafana's own {{ }}: it goes into files/ and the template
		// reads it with .Files.Get, which Helm does not run as a template.
		if o["kind"] == "ConfigMap" {
			data, _ := o["data"].(map[string]any)
			for _, key := range sortedKeys(data) {
				s, _ := data[key].(string)
				path := "files/" + key
				files[path] = []byte(s)
				data[key] = t.expr(fmt.Sprintf("{{ .Files.Get %q | toJson }}", path))
			}
		}
		if err := addTemplate(files, t, o, "", ".Values.monitoring.dashboard.enabled"); err != nil {
			return nil, err
		}
	}

	valuesYAML, err := valuesFile(vals)
	if err != nil {
		return nil, err
	}
	files["values.yaml"] = valuesYAML
	if files["values.schema.json"], err = valuesSchema(vals); err != nil {
		return nil, err
	}
	files["Chart.yaml"] = chartFile(meta)
	files[".helmignore"] = []byte(helmignore)
	files["templates/_helpers.tpl"] = []byte(helpers)
	files["templates/NOTES.txt"] = []byte(notes)
	return files, nil
}

// common templates what every object of the chart has: the release namespace in place of the
// one kustomize sets (in metadata and in ServiceAccount subjects), and Helm's labels in place of
// managed-by: kustomize. extraLabels, when set, is a map value whose labels are added too.
func common(t *templater, o object, ns, extraLabels string) error {
	md := nestedMap(o, "metadata")
	if v, ok := md["namespace"]; ok {
		if v != ns {
			return fmt.Errorf("%s %s: namespace %v, want the install namespace %s", o["kind"], name(o), v, ns)
		}
		md["namespace"] = t.expr(releaseNamespace)
	}
	if subjects, ok := o["subjects"].([]any); ok {
		for _, s := range subjects {
			if sm, ok := s.(map[string]any); ok && sm["namespace"] == ns {
				sm["namespace"] = t.expr(releaseNamespace)
			}
		}
	}
	labels := nestedMap(o, "metadata", "labels")
	delete(labels, managedByLabel)
	t.addBlock(labels, `{{- include "kvrouter.labels" . | nindent +0 }}`)
	if extraLabels != "" {
		t.addBlock(labels, "{{- with "+extraLabels+" }}\n{{- toYaml . | nindent +0 }}\n{{- end }}")
	}
	return nil
}

// addTemplate renders o into templates/, inside {{ if cond }} where cond is set.
func addTemplate(files map[string][]byte, t *templater, o object, header, cond string) error {
	text, err := t.render(o)
	if err != nil {
		return err
	}
	if cond != "" {
		text = "{{- if " + cond + " }}\n" + text + "{{- end }}\n"
	}
	path := filepath.Join("templates", strings.ToLower(o["kind"].(string))+"-"+name(o)+".yaml")
	if _, dup := files[path]; dup {
		return fmt.Errorf("two objects would be written to %s", path)
	}
	files[path] = []byte(header + text)
	return nil
}

// installNamespace is the one Namespace of config/default, the namespace kustomize puts the
// operator in and that the chart replaces with the release namespace.
func installNamespace(objs []object) (string, error) {
	var found []string
	for _, o := range objs {
		if o["kind"] == "Namespace" {
			found = append(found, name(o))
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("config/default: want one Namespace (where the operator runs), found %q", found)
	}
	return found[0], nil
}

// templateManager templates the manager Deployment: replicas, images, the RELATED_IMAGE_*
// variables, leader election, watch namespaces, resources and the pod's scheduling fields.
func templateManager(t *templater, dep object, vals *chartValues) error {
	where := fmt.Sprintf("Deployment %s", name(dep))
	spec := nestedMap(dep, "spec")
	vals.replicas = spec["replicas"]
	if vals.replicas == nil {
		vals.replicas = 1
	}
	spec["replicas"] = t.expr("{{ .Values.replicas }}")

	tmeta := nestedMap(dep, "spec", "template", "metadata")
	t.addBlock(nestedMap(tmeta, "annotations"), "{{- with .Values.podAnnotations }}\n{{- toYaml . | nindent +0 }}\n{{- end }}")
	t.addBlock(nestedMap(tmeta, "labels"), "{{- with .Values.podLabels }}\n{{- toYaml . | nindent +0 }}\n{{- end }}")

	pod := nestedMap(dep, "spec", "template", "spec")
	for _, f := range []struct{ field, value string }{
		{"imagePullSecrets", "imagePullSecrets"}, {"nodeSelector", "nodeSelector"},
		{"tolerations", "tolerations"}, {"affinity", "affinity"},
	} {
		if _, set := pod[f.field]; set {
			return fmt.Errorf("%s: config/ sets spec.template.spec.%s, which the chart sets from .Values.%s: teach hack/helmchart to default the value to it", where, f.field, f.value)
		}
		t.addBlock(pod, fmt.Sprintf("{{- with .Values.%s }}\n%s:\n  {{- toYaml . | nindent +2 }}\n{{- end }}", f.value, f.field))
	}
	if _, set := pod["priorityClassName"]; set {
		return fmt.Errorf("%s: config/ sets priorityClassName, which the chart sets from .Values.priorityClassName", where)
	}
	t.addBlock(pod, "{{- with .Values.priorityClassName }}\npriorityClassName: {{ . | quote }}\n{{- end }}")

	containers, _ := pod["containers"].([]any)
	if len(containers) != 1 {
		return fmt.Errorf("%s: want one container (%s), found %d", where, managerContainer, len(containers))
	}
	c, _ := containers[0].(map[string]any)
	if c == nil || c["name"] != managerContainer {
		return fmt.Errorf("%s: the container is not named %s", where, managerContainer)
	}
	img, err := parseImage(managerContainer, "", c["image"])
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	vals.images = append(vals.images, img)
	c["image"] = t.expr(`{{ include "kvrouter.image" .Values.image.manager }}`)
	if _, set := c["imagePullPolicy"]; set {
		return fmt.Errorf("%s: config/ sets imagePullPolicy, which the chart sets from .Values.imagePullPolicy", where)
	}
	t.addBlock(c, "{{- with .Values.imagePullPolicy }}\nimagePullPolicy: {{ . }}\n{{- end }}")
	vals.resources = c["resources"]
	delete(c, "resources")
	t.addBlock(c, "{{- with .Values.resources }}\nresources:\n  {{- toYaml . | nindent +2 }}\n{{- end }}")

	args, _ := c["args"].([]any)
	i := slices.Index(args, any(leaderElectArg))
	if i < 0 {
		return fmt.Errorf("%s: no %s argument, which .Values.leaderElection.enabled switches", where, leaderElectArg)
	}
	args[i] = t.block("{{- if .Values.leaderElection.enabled }}\n- " + leaderElectArg + "\n{{- end }}")
	c["args"] = append(args, t.block("{{- with .Values.extraArgs }}\n{{- toYaml . | nindent +0 }}\n{{- end }}"))

	env, _ := c["env"].([]any)
	var sawWatch bool
	for i, e := range env {
		em, _ := e.(map[string]any)
		n, _ := em["name"].(string)
		switch {
		case strings.HasPrefix(n, relatedPrefix):
			key := camel(strings.TrimPrefix(n, relatedPrefix))
			img, err := parseImage(key, n, em["value"])
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if key == managerContainer || slices.ContainsFunc(vals.images, func(v imageValue) bool { return v.key == key }) {
				return fmt.Errorf("%s: %s would take the value image.%s twice", where, n, key)
			}
			vals.images = append(vals.images, img)
			em["value"] = t.expr(fmt.Sprintf(`{{ include "kvrouter.image" .Values.image.%s | quote }}`, key))
		case n == watchEnv:
			// Without watchNamespaces the variable stays what config/manager makes it (OLM's
			// target namespaces; empty, so every namespace, outside OLM).
			orig, err := itemYAML(em)
			if err != nil {
				return err
			}
			sawWatch = true
			env[i] = t.block("{{- if .Values.watchNamespaces }}\n- name: " + watchEnv +
				"\n  value: {{ join \",\" .Values.watchNamespaces | quote }}\n{{- else }}\n" + orig + "\n{{- end }}")
		}
	}
	if !sawWatch {
		return fmt.Errorf("%s: no %s variable, which .Values.watchNamespaces sets", where, watchEnv)
	}
	c["env"] = append(env, t.block("{{- with .Values.extraEnv }}\n{{- toYaml . | nindent +0 }}\n{{- end }}"))
	return nil
}

// parseImage splits an image reference (REPO, REPO:TAG, REPO@DIGEST or REPO:TAG@DIGEST) into
// the values the chart joins again.
func parseImage(key, env string, v any) (imageValue, error) {
	ref, _ := v.(string)
	of := "the manager container"
	if env != "" {
		of = env
	}
	if ref == "" {
		return imageValue{}, fmt.Errorf("%s: no image", of)
	}
	img := imageValue{key: key, env: env, of: of}
	rest, digest, _ := strings.Cut(ref, "@")
	img.digest = digest
	if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		img.repository, img.tag = rest[:i], rest[i+1:]
	} else {
		img.repository = rest
	}
	if img.tag == "" && img.digest == "" {
		return imageValue{}, fmt.Errorf("%s: image %q has neither tag nor digest (did kustomize's images resolve it?)", of, ref)
	}
	return img, nil
}

// kustomizeBuild is gen.KustomizeBuild with the objects as plain maps, which the
// templater edits in place; every object has a kind and a name.
func kustomizeBuild(dir string) ([]object, error) {
	us, err := gen.KustomizeBuild(dir)
	if err != nil {
		return nil, err
	}
	out := make([]object, 0, len(us))
	for _, u := range us {
		if u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("kustomize build %s: an object without kind or name", dir)
		}
		out = append(out, u.Object)
	}
	return out, nil
}

type csvMeta struct {
	version, minKube string
}

// readCSVBase reads the version and the minimum Kubernetes version from the OLM CSV base, the
// one place the repository keeps them (`make bundle VERSION=` overrides the version the same way).
func readCSVBase(configDir, version string) (csvMeta, error) {
	paths, err := filepath.Glob(filepath.Join(configDir, "manifests", "bases", "*.clusterserviceversion.yaml"))
	if err != nil || len(paths) != 1 {
		return csvMeta{}, fmt.Errorf("%s: want one *.clusterserviceversion.yaml, found %d", filepath.Join(configDir, "manifests", "bases"), len(paths))
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		return csvMeta{}, err
	}
	var csv struct {
		Spec struct {
			Version        string `json:"version"`
			MinKubeVersion string `json:"minKubeVersion"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &csv); err != nil {
		return csvMeta{}, fmt.Errorf("%s: %w", paths[0], err)
	}
	if version == "" {
		version = csv.Spec.Version
	}
	v, err := semver.Parse(strings.TrimPrefix(version, "v"))
	if err != nil {
		return csvMeta{}, fmt.Errorf("version %q: %w", version, err)
	}
	m := csvMeta{version: v.String()}
	if csv.Spec.MinKubeVersion != "" {
		if _, err := semver.Parse(csv.Spec.MinKubeVersion); err != nil {
			return csvMeta{}, fmt.Errorf("%s: minKubeVersion %q: %w", paths[0], csv.Spec.MinKubeVersion, err)
		}
		m.minKube = csv.Spec.MinKubeVersion
	}
	return m, nil
}

// camel turns an environment variable suffix (SIMULATOR, FOO_BAR) into a value key (simulator, fooBar).
func camel(s string) string {
	var b strings.Builder
	for i, part := range strings.Split(strings.ToLower(s), "_") {
		if i > 0 && part != "" {
			part = string(unicode.ToUpper(rune(part[0]))) + part[1:]
		}
		b.WriteString(part)
	}
	return b.String()
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
