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

package render

import (
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// API keys reach the pods by reference only: the operator never reads a Secret (it has no
// permission to). The router mounts its keys as files it re-reads, so a rotated Secret applies
// without a restart; vLLM takes its key from the environment at start.
const (
	// DefaultAPIKeySecretKey is the Secret key read when an apiKeySecret names none.
	DefaultAPIKeySecretKey = "api-key"

	// EngineAPIKeyEnv is the variable vLLM (and vllm-sim) read their API key from.
	EngineAPIKeyEnv = "VLLM_API_KEY"

	volumeRouterKeys = "api-keys"
	volumeEngineKey  = "engine-api-key"
	routerKeysDir    = "/etc/kvrouter/api-keys"
	engineKeyDir     = "/etc/kvrouter/engine-api-key"
	// The file names inside the mounts; the Secret's key is projected onto them.
	routerKeysFile = "keys"
	engineKeyFile  = "key"
)

func secretKey(ref *v1alpha1.SecretKeyRef) string {
	if ref.Key == "" {
		return DefaultAPIKeySecretKey
	}
	return ref.Key
}

// routerKeyArgs are the router flags that point it at its key files.
func routerKeyArgs(kvr *v1alpha1.KVRouter) []string {
	var args []string
	if kvr.Spec.Router.APIKeySecret != nil {
		args = append(args, "--api-key-file", routerKeysDir+"/"+routerKeysFile)
	}
	if kvr.Spec.Engine.APIKeySecret != nil {
		args = append(args, "--engine-api-key-file", engineKeyDir+"/"+engineKeyFile)
	}
	return args
}

// routerKeyVolumes mounts the router's key files: one key of a Secret each, read only. A
// Secret volume (unlike an env var or a subPath mount) follows updates of the Secret.
func routerKeyVolumes(kvr *v1alpha1.KVRouter) ([]corev1.Volume, []corev1.VolumeMount) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	add := func(ref *v1alpha1.SecretKeyRef, volume, dir, file string) {
		if ref == nil {
			return
		}
		vols = append(vols, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: ref.Name, Items: []corev1.KeyToPath{{Key: secretKey(ref), Path: file}},
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: volume, MountPath: dir, ReadOnly: true})
	}
	add(kvr.Spec.Router.APIKeySecret, volumeRouterKeys, routerKeysDir, routerKeysFile)
	add(kvr.Spec.Engine.APIKeySecret, volumeEngineKey, engineKeyDir, engineKeyFile)
	return vols, mounts
}

// engineKeyEnv gives the engines their key from the Secret.
func engineKeyEnv(kvr *v1alpha1.KVRouter) []corev1.EnvVar {
	ref := kvr.Spec.Engine.APIKeySecret
	if ref == nil {
		return nil
	}
	return []corev1.EnvVar{{Name: EngineAPIKeyEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: secretKey(ref),
	}}}}
}

// defaultAPIKeys mirrors the schema default of apiKeySecret.key.
func defaultAPIKeys(kvr *v1alpha1.KVRouter) {
	for _, ref := range []*v1alpha1.SecretKeyRef{kvr.Spec.Router.APIKeySecret, kvr.Spec.Engine.APIKeySecret} {
		if ref != nil && ref.Key == "" {
			ref.Key = DefaultAPIKeySecretKey
		}
	}
}

// apiKeyFlag matches vLLM's --api-key in any of its spellings, mirroring the CRD rule.
var apiKeyFlag = regexp.MustCompile(`^--api[-_]key(=.*)?$`)

// secretDataKey mirrors the schema pattern of apiKeySecret.key.
var secretDataKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// validateAPIKeys mirrors the schema and CEL rules of the apiKeySecret fields.
func validateAPIKeys(kvr *v1alpha1.KVRouter) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	for _, r := range []struct {
		path *field.Path
		ref  *v1alpha1.SecretKeyRef
	}{
		{spec.Child("router", "apiKeySecret"), kvr.Spec.Router.APIKeySecret},
		{spec.Child("engine", "apiKeySecret"), kvr.Spec.Engine.APIKeySecret},
	} {
		if r.ref == nil {
			continue
		}
		for _, msg := range validation.IsDNS1123Subdomain(r.ref.Name) {
			errs = append(errs, field.Invalid(r.path.Child("name"), r.ref.Name, "must be a Secret name: "+msg))
		}
		if k := secretKey(r.ref); len(k) > validation.DNS1123SubdomainMaxLength || !secretDataKey.MatchString(k) {
			errs = append(errs, field.Invalid(r.path.Child("key"), k, "must be a Secret data key: letters, digits, '-', '_' or '.'"))
		}
	}
	e := kvr.Spec.Engine
	if e.APIKeySecret == nil {
		return errs
	}
	ep := spec.Child("engine")
	const why = "the engines would check a key the router does not send; spec.engine.apiKeySecret sets it"
	for i, env := range e.Env {
		if env.Name == EngineAPIKeyEnv {
			errs = append(errs, field.Invalid(ep.Child("env").Index(i).Child("name"), env.Name, why))
		}
	}
	for i, arg := range e.ExtraArgs {
		if apiKeyFlag.MatchString(arg) {
			errs = append(errs, field.Invalid(ep.Child("extraArgs").Index(i), "--api-key", why)) // never the value
		}
	}
	return errs
}
