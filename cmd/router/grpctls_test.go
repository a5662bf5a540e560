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
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	certutil "k8s.io/client-go/util/cert"
)

func writePair(t *testing.T, dir, host string, mod time.Time) (certFile, keyFile string) {
	t.Helper()
	c, k, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string][]byte{certFile: c, keyFile: k} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

func commonName(t *testing.T, kp *keyPair) string {
	t.Helper()
	c, err := kp.get(nil)
	if err != nil {
		t.Fatal(err)
	}
	x, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return x.Subject.CommonName
}

// A rotated certificate (cert-manager renewing its Secret) is served without a restart; a pair
// caught half-written keeps the last good one in service; a pair that does not load at start is
// an error.
func TestPickerCertificateReload(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	certFile, keyFile := writePair(t, dir, "first", t0)
	now := t0
	kp := &keyPair{certFile: certFile, keyFile: keyFile, log: logr.Discard(), now: func() time.Time { return now }}
	if cn := commonName(t, kp); !strings.HasPrefix(cn, "first") {
		t.Fatalf("serving %q", cn)
	}
	writePair(t, dir, "second", t0.Add(time.Hour))
	if cn := commonName(t, kp); !strings.HasPrefix(cn, "first") {
		t.Fatalf("re-read within the recheck interval: %q", cn)
	}
	now = now.Add(keyPairRecheck + time.Second)
	if cn := commonName(t, kp); !strings.HasPrefix(cn, "second") {
		t.Fatalf("after a rotation: serving %q", cn)
	}
	if err := os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\nhalf"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(keyPairRecheck + time.Second)
	if cn := commonName(t, kp); !strings.HasPrefix(cn, "second") {
		t.Fatalf("a broken pair replaced the good one: %q", cn)
	}

	broken := &keyPair{certFile: certFile, keyFile: keyFile, log: logr.Discard(), now: time.Now}
	if _, err := broken.get(nil); err == nil || !strings.Contains(err.Error(), "--grpc-tls-cert-file") {
		t.Fatalf("a pair that does not load at start: %v", err)
	}
	o := &options{grpcTLS: true, grpcCertFile: certFile, grpcKeyFile: keyFile}
	if _, err := pickerTLS(o, logr.Discard()); err == nil {
		t.Fatal("pickerTLS accepted a broken pair")
	}
}

func TestPickerTLSFlags(t *testing.T) {
	base := []string{"--endpoints-file", "x", "--mode", "epp"}
	for _, bad := range [][]string{
		{"--grpc-tls", "--grpc-tls-cert-file", "c"},
		{"--grpc-tls", "--grpc-tls-key-file", "k"},
		{"--grpc-tls=false", "--grpc-tls-cert-file", "c", "--grpc-tls-key-file", "k"},
	} {
		if _, err := parseFlags(append(base, bad...), io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	o, err := parseFlags(append(base, "--grpc-tls-cert-file", "c", "--grpc-tls-key-file", "k"), io.Discard)
	if err != nil || !o.grpcTLS || o.grpcCertFile != "c" || o.grpcKeyFile != "k" {
		t.Fatalf("%+v %v", o, err)
	}
	// TLS is the default: gateways dial pickers with it.
	o, err = parseFlags(base, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pickerTLS(o, logr.Discard())
	if err != nil || cfg == nil || len(cfg.Certificates) != 1 {
		t.Fatalf("self-signed: %+v %v", cfg, err)
	}
}
