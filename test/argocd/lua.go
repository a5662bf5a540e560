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

// Package argocd tests config/argocd/health.lua, the Argo CD health check for KVRouter, in the
// Lua environment Argo CD runs custom health checks in.
package argocd

import (
	"context"
	"fmt"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// HealthStatus is what a health script returns: Argo CD reads the fields status and message.
type HealthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// argoHealthStatuses are the values Argo CD accepts from a script; it turns any other into Unknown.
// (Missing and Unknown are Argo CD's own verdicts, never what a KVRouter check should say.)
var argoHealthStatuses = map[string]bool{"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true}

// scriptTimeout is the limit Argo CD puts on one run of a health script.
const scriptTimeout = time.Second

// RunHealth runs script the way Argo CD runs a health check configured in argocd-cm: gopher-lua
// with the standard libraries skipped and only base, package and table opened, the object as the
// global obj, and the script's return value read as {status, message}. Argo CD also opens a
// reduced os library (time and date); this harness leaves os out, so a script that passes here
// cannot depend on anything Argo CD lacks.
func RunHealth(script string, obj map[string]any) (HealthStatus, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := L.CallByParam(lua.P{Fn: L.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return HealthStatus{}, fmt.Errorf("opening Lua library %q: %w", lib.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	L.SetContext(ctx)

	v, err := toLua(L, obj)
	if err != nil {
		return HealthStatus{}, fmt.Errorf("converting the object: %w", err)
	}
	L.SetGlobal("obj", v)
	if err := L.DoString(script); err != nil {
		return HealthStatus{}, fmt.Errorf("running the script: %w", err)
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return HealthStatus{}, fmt.Errorf("the script returned %s, want a table", L.Get(-1).Type())
	}
	var hs HealthStatus
	for key, dst := range map[string]*string{"status": &hs.Status, "message": &hs.Message} {
		switch f := ret.RawGetString(key).(type) {
		case lua.LString:
			*dst = string(f)
		case *lua.LNilType:
			if key == "status" {
				return HealthStatus{}, fmt.Errorf("the script returned no status")
			}
		default:
			return HealthStatus{}, fmt.Errorf("the script returned a %s %s, want a string", f.Type(), key)
		}
	}
	if !argoHealthStatuses[hs.Status] {
		return HealthStatus{}, fmt.Errorf("the script returned status %q, which Argo CD reports as Unknown", hs.Status)
	}
	return hs, nil
}

// toLua converts a decoded JSON (or unstructured) object into Lua values as Argo CD does: objects
// and arrays become tables (arrays indexed from 1), numbers become Lua numbers. Unlike Argo CD,
// which silently turns an unexpected Go type into nil, it refuses one.
func toLua(L *lua.LState, v any) (lua.LValue, error) {
	switch x := v.(type) {
	case nil:
		return lua.LNil, nil
	case bool:
		return lua.LBool(x), nil
	case string:
		return lua.LString(x), nil
	case float64:
		return lua.LNumber(x), nil
	case int64:
		return lua.LNumber(x), nil
	case int:
		return lua.LNumber(x), nil
	case []any:
		t := L.CreateTable(len(x), 0)
		for i, item := range x {
			lv, err := toLua(L, item)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			t.Append(lv)
		}
		return t, nil
	case map[string]any:
		t := L.CreateTable(0, len(x))
		for k, item := range x {
			lv, err := toLua(L, item)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			t.RawSetString(k, lv)
		}
		return t, nil
	}
	return nil, fmt.Errorf("unsupported value of type %T", v)
}
