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
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	certutil "k8s.io/client-go/util/cert"
)

// pickerTLS is the TLS the ext_proc port serves, nil with --grpc-tls=false. Without a
// certificate of the user's it is a self-signed one made at start, as the Inference Extension's
// reference picker does: the gateways that call a picker dial it with TLS and do not verify it
// (some cannot dial one in clear text at all). With --grpc-tls-cert-file and -key-file (a
// cert-manager Secret, say) the pair is re-read when the files change, so that a renewed
// certificate applies without a restart.
func pickerTLS(o *options, log logr.Logger) (*tls.Config, error) {
	if !o.grpcTLS {
		return nil, nil
	}
	if o.grpcCertFile == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "kvrouter"
		}
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("self-signed certificate for --grpc-tls: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("self-signed certificate for --grpc-tls: %w", err)
		}
		log.Info("ext_proc port serves TLS with a self-signed certificate (give --grpc-tls-cert-file and --grpc-tls-key-file for one of yours)")
		return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
	}
	kp := &keyPair{certFile: o.grpcCertFile, keyFile: o.grpcKeyFile, log: log, now: time.Now}
	if _, err := kp.get(nil); err != nil {
		return nil, err // a pair that does not load at start is a configuration error
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get}, nil
}

// keyPair serves a certificate and key from files, re-reading them at most every recheck when
// either file's modification time changed. A pair that stops loading (a half-written rotation)
// keeps the last good one in service and is logged.
type keyPair struct {
	certFile, keyFile string
	log               logr.Logger
	now               func() time.Time

	mu           sync.Mutex
	cert         *tls.Certificate
	certMod      time.Time
	keyMod       time.Time
	checked      time.Time
	lastErrorMsg string
}

const keyPairRecheck = 10 * time.Second

func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	if k.cert != nil && now.Sub(k.checked) < keyPairRecheck {
		return k.cert, nil
	}
	k.checked = now
	cs, cerr := os.Stat(k.certFile)
	ks, kerr := os.Stat(k.keyFile)
	if cerr == nil && kerr == nil && k.cert != nil && cs.ModTime().Equal(k.certMod) && ks.ModTime().Equal(k.keyMod) {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		err = fmt.Errorf("--grpc-tls-cert-file/--grpc-tls-key-file: %w", err)
		if k.cert == nil {
			return nil, err
		}
		if msg := err.Error(); msg != k.lastErrorMsg {
			k.lastErrorMsg = msg
			k.log.Error(err, "cannot reload the ext_proc certificate; still serving the previous one")
		}
		return k.cert, nil
	}
	if k.cert != nil {
		k.log.Info("ext_proc certificate reloaded")
	}
	k.cert, k.lastErrorMsg = &cert, ""
	if cerr == nil && kerr == nil {
		k.certMod, k.keyMod = cs.ModTime(), ks.ModTime()
	}
	return k.cert, nil
}
