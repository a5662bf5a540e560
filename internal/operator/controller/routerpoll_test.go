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

import "testing"

// The status poller reads /v1/status on the router Service's admin port: the public port does
// not serve it.
func TestRouterStatusReadFromAdminPort(t *testing.T) {
	if got := (&KVRouterReconciler{}).routerBaseURL(testKVRouter()); got != "http://m-router.ns.svc:9090" {
		t.Errorf("routerBaseURL = %s, want the admin port of the router Service", got)
	}
}
