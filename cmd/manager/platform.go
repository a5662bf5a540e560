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
	"errors"
	"flag"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// Values of --platform.
const (
	platformAuto       = "auto"
	platformKubernetes = "kubernetes"
	platformOpenShift  = "openshift"
)

// sccGroupKind is served only by OpenShift, whose admission gives every pod a UID from its
// namespace's range under the restricted-v2 SecurityContextConstraints.
var sccGroupKind = schema.GroupKind{Group: "security.openshift.io", Kind: "SecurityContextConstraints"}

// platformFlags decide who picks the UID of engine pods: --platform and --engine-uid.
type platformFlags struct {
	platform  string
	engineUID int64
}

// bindPlatformFlags binds --platform (default def) and --engine-uid. `manager render` has no
// cluster to ask, so it defaults to kubernetes and refuses auto.
func bindPlatformFlags(fs *flag.FlagSet, def string) *platformFlags {
	p := &platformFlags{}
	usage := "kubernetes: vLLM engine pods run as --engine-uid; openshift: pods carry no UID, runAsGroup or fsGroup and the restricted-v2 SCC assigns them"
	if def == platformAuto {
		usage = "auto: openshift when the API server serves security.openshift.io SecurityContextConstraints, else kubernetes; " + usage
	}
	fs.StringVar(&p.platform, "platform", def, usage)
	fs.Int64Var(&p.engineUID, "engine-uid", render.DefaultEngineUID,
		"UID of vLLM engine pods on --platform kubernetes (the vllm user of the vllm/vllm-openai image); spec.engine.runAsUser overrides it")
	return p
}

func (p *platformFlags) validate(allowAuto bool) error {
	switch {
	case p.platform == platformAuto && !allowAuto:
		return fmt.Errorf("--platform %s needs a cluster; use %s or %s", platformAuto, platformKubernetes, platformOpenShift)
	case p.platform != platformAuto && p.platform != platformKubernetes && p.platform != platformOpenShift:
		return fmt.Errorf("--platform must be %s, %s or %s, not %q", platformAuto, platformKubernetes, platformOpenShift, p.platform)
	case p.engineUID < 1 || p.engineUID > 2147483647:
		return fmt.Errorf("--engine-uid must be between 1 and 2147483647, not %d: engines never run as root", p.engineUID)
	}
	return nil
}

// apply sets the UID fields of opts and returns the platform it settled on. With auto it asks
// mapper; a discovery error is returned rather than guessed over, because guessing kubernetes on
// OpenShift gets every engine pod refused by admission, and guessing openshift elsewhere gets
// every vLLM pod refused by the kubelet.
func (p *platformFlags) apply(opts *render.Options, mapper meta.RESTMapper) (string, error) {
	platform := p.platform
	if platform == platformAuto {
		openShift, err := servesSCC(mapper)
		if err != nil {
			return "", err
		}
		platform = platformKubernetes
		if openShift {
			platform = platformOpenShift
		}
	}
	opts.PlatformAssignsUID = platform == platformOpenShift
	opts.EngineUID = p.engineUID
	return platform, nil
}

func servesSCC(mapper meta.RESTMapper) (bool, error) {
	if mapper == nil {
		return false, errors.New("--platform auto needs a cluster")
	}
	_, err := mapper.RESTMapping(sccGroupKind)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("discovering %s.%s (for --platform auto): %w", sccGroupKind.Kind, sccGroupKind.Group, err)
}
