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
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kvrouter/kvrouter/test/fleettest"
	"github.com/kvrouter/kvrouter/test/rbacaudit"
)

// inOwnProcess marks a test process that an envtest test of the manager started for itself.
const inOwnProcess = "KVROUTER_TEST_IN_OWN_PROCESS"

// inOwnTestProcess reports whether t runs in a test process of its own. runManager registers the
// controller under its name, which a process allows once, so each test that runs the manager
// runs again in a child process: in the parent this waits for the child, fails t with its output
// if it did not pass, and returns false; in the child it returns true.
func inOwnTestProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(inOwnProcess) != "" {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), inOwnProcess+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%v:\n%s", err, out)
	}
	return false
}

// auditedControlPlane is a started control plane whose audit log records what user (the manager
// under test, holding only what the test binds to it) asks of the API server.
type auditedControlPlane struct {
	root, user, auditLog string
	env                  *envtest.Environment
	cfg                  *rest.Config
	stopped              bool
}

func startAuditedControlPlane(t *testing.T, user string) *auditedControlPlane {
	t.Helper()
	root, env := bareControlPlane(t)
	auditLog, err := rbacaudit.Enable(env, t.TempDir(), user)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	cp := &auditedControlPlane{root: root, user: user, auditLog: auditLog, env: env, cfg: cfg}
	t.Cleanup(func() { cp.stop(t) })
	return cp
}

// stop ends the control plane (once): every watch ends, so its audit event is final.
func (cp *auditedControlPlane) stop(t *testing.T) {
	if cp.stopped {
		return
	}
	cp.stopped = true
	if err := cp.env.Stop(); err != nil {
		t.Error(err)
	}
}

// userKubeconfig writes a kubeconfig that authenticates as the user under test.
func (cp *auditedControlPlane) userKubeconfig(t *testing.T) string {
	t.Helper()
	u, err := cp.env.AddUser(envtest.User{Name: cp.user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// auditedRequests stops the control plane, fails t for every request of the user that the API
// server refused (config/rbac lacks it), and returns all the audited requests.
func (cp *auditedControlPlane) auditedRequests(t *testing.T) []rbacaudit.Request {
	t.Helper()
	cp.stop(t)
	reqs, err := rbacaudit.Read(cp.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rbacaudit.Refused(reqs, cp.isUser) {
		t.Errorf("the API server refused the manager %s in %q: config/rbac lacks it", r.Permission, r.Namespace)
	}
	return reqs
}

func (cp *auditedControlPlane) isUser(r rbacaudit.Request) bool { return r.User == cp.user }

// runningManager is runManager in a goroutine, its output kept for a failed test's log.
type runningManager struct {
	config *managerConfig
	stderr fleettest.SyncBuffer
	cancel context.CancelFunc
	exit   chan int
}

func startManager(t *testing.T, args ...string) *runningManager {
	t.Helper()
	m := &runningManager{exit: make(chan int, 1)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("manager output:\n%s", m.stderr.String())
		}
	})
	c, err := parseFlags(args, &m.stderr)
	if err != nil {
		t.Fatal(err)
	}
	m.config = c
	var ctx context.Context
	ctx, m.cancel = context.WithCancel(context.Background())
	t.Cleanup(m.cancel)
	go func() { m.exit <- runManager(ctx, c, &m.stderr) }()
	return m
}

// stop cancels the manager and fails t unless it exits cleanly within 30 s.
func (m *runningManager) stop(t *testing.T) {
	t.Helper()
	m.cancel()
	select {
	case code := <-m.exit:
		if code != 0 {
			t.Fatalf("manager exited with %d:\n%s", code, m.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("manager did not stop within 30s of cancellation")
	}
}
