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
	"flag"
	"fmt"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// serviceAccountNamespaceFile is where every pod with a mounted ServiceAccount token finds its
// own namespace.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// adminAccessFlags say who the router's NetworkPolicy lets reach its admin port:
// --operator-namespace, --monitoring-namespace-selector and --autoscaler-namespace-selector.
type adminAccessFlags struct {
	operatorNamespace      string
	monitoring, autoscaler string
}

// bindAdminAccessFlags binds the flags. The operator's namespace defaults to $POD_NAMESPACE
// (config/manager sets it from the pod), then the namespace of the pod's ServiceAccount, so
// that an operator installed by OLM into any namespace still reaches its routers.
func bindAdminAccessFlags(fs *flag.FlagSet) *adminAccessFlags {
	f := &adminAccessFlags{}
	fs.StringVar(&f.operatorNamespace, "operator-namespace", ownNamespace(),
		"namespace of the operator's pods, which the router NetworkPolicy lets read the routers' admin port (/v1/status); default $POD_NAMESPACE, else the pod's ServiceAccount namespace, else "+render.DefaultOperatorNamespace)
	fs.StringVar(&f.monitoring, "monitoring-namespace-selector", metav1.FormatLabelSelector(render.DefaultMonitoringNamespaces()),
		"label selector of the namespaces whose pods may scrape the routers' admin port (Prometheus)")
	fs.StringVar(&f.autoscaler, "autoscaler-namespace-selector", metav1.FormatLabelSelector(render.DefaultAutoscalerNamespaces()),
		"label selector of the namespaces whose pods may read the routers' /v1/autoscale (KEDA's operator)")
	return f
}

// apply parses the selectors into opts. A selector left at its default stays nil in opts, which
// means the same default to render.
func (f *adminAccessFlags) apply(fs *flag.FlagSet, opts *render.Options) error {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	opts.OperatorNamespace = f.operatorNamespace
	for _, s := range []struct {
		flag, value string
		into        **metav1.LabelSelector
	}{
		{"monitoring-namespace-selector", f.monitoring, &opts.MonitoringNamespaces},
		{"autoscaler-namespace-selector", f.autoscaler, &opts.AutoscalerNamespaces},
	} {
		if !given[s.flag] {
			continue
		}
		if strings.TrimSpace(s.value) == "" {
			return fmt.Errorf("--%s is empty: it would open the routers' admin port to every namespace", s.flag)
		}
		sel, err := metav1.ParseToLabelSelector(s.value)
		if err != nil {
			return fmt.Errorf("--%s: %w", s.flag, err)
		}
		*s.into = sel
	}
	return nil
}

func ownNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return render.DefaultOperatorNamespace
}
