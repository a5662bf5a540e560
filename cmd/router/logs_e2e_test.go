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
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/test/fleettest"
)

// TestE2ENoPromptsOrSecretsInLogs runs the data plane at the default log level with prompts
// that carry a unique marker, prompts given as known token ids, API keys on both sides and a
// Hugging Face token on the engine's command line, through the paths that log (routing, a 401,
// a 400, an engine that stops answering), and checks that none of them reaches the router's
// or the engines' output.
func TestE2ENoPromptsOrSecretsInLogs(t *testing.T) {
	fleettest.NeedBinaries(t)
	const (
		promptMarker = "PROMPTMARKER-3b9e1c"
		engineKey    = "ENGINEKEYMARKER-51d0"
		routerKey    = "ROUTERKEYMARKER-c7a2"
		hfToken      = "hf_HFTOKENMARKER-0e44"
	)
	// Token ids above 65535, so that no port or pid is mistaken for them.
	ids := []int{127301, 119877, 100213, 98765, 120001, 77777, 111111, 123456}

	engines := []*fleettest.Engine{
		// --hf-token is a vLLM flag the simulator does not model: it warns about it.
		fleettest.StartEngine(t, "e0", "1", "--api-key", engineKey, "--hf-token", hfToken),
		fleettest.StartEngine(t, "e1", "1", "--api-key", engineKey, "--hf-token="+hfToken),
	}
	dir := t.TempDir()
	clientKeys, engineKeyFile := filepath.Join(dir, "keys"), filepath.Join(dir, "engine-key")
	writeFile(t, clientKeys, routerKey+"\n")
	writeFile(t, engineKeyFile, engineKey+"\n")
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, engines),
		"--api-key-file", clientKeys, "--engine-api-key-file", engineKeyFile)
	r.WaitConnected(t, 2)
	auth := "Bearer " + routerKey

	text := func(i int) string {
		return fmt.Sprintf("%s %s question %d", strings.Repeat("shared words ", 40), promptMarker, i)
	}
	chat := func(i int, stream bool) string {
		b, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 3, "stream": stream,
			"messages": []map[string]string{{"role": "user", "content": text(i)}}})
		return string(b)
	}
	idsBody, _ := json.Marshal(map[string]any{"model": "m", "prompt": ids, "max_tokens": 3})
	for i, c := range []struct {
		path, body, auth string
		want             int
	}{
		{"/v1/completions", fleettest.Completion(text(0), 3, false), auth, http.StatusOK},
		{"/v1/completions", fleettest.Completion(text(1), 3, true), auth, http.StatusOK},
		{"/v1/chat/completions", chat(2, false), auth, http.StatusOK},
		{"/v1/chat/completions", chat(3, true), auth, http.StatusOK},
		{"/v1/completions", string(idsBody), auth, http.StatusOK},
		{"/v1/completions", fleettest.Completion(text(4), 3, false), "Bearer " + promptMarker, http.StatusUnauthorized},
		{"/v1/completions", `{"model":"m","prompt":"` + promptMarker + `","max_tokens":"many"}`, auth, http.StatusBadRequest},
		{"/v1/completions", `{"model":"m","prompt":"` + promptMarker + `"`, auth, http.StatusBadRequest},
	} {
		if code, body := send(t, http.MethodPost, r.URL+c.path, c.body, c.auth); code != c.want {
			t.Fatalf("request %d: %d %s, want %d", i, code, body, c.want)
		}
	}
	// The engine that holds the shared prefix goes away: the next request sharing it is sent
	// there first, and the router logs the failed attempt and retries on the other engine.
	req, _ := http.NewRequest(http.MethodPost, r.URL+"/v1/completions", strings.NewReader(fleettest.Completion(text(5), 3, false)))
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	holder := 0
	if resp.Header.Get("X-Kvrouter-Endpoint") == engines[1].Name {
		holder = 1
	}
	engines[holder].Proc.Kill()
	for i := 6; i < 9; i++ {
		if code, body := send(t, http.MethodPost, r.URL+"/v1/completions", fleettest.Completion(text(i), 3, false), auth); code != http.StatusOK {
			t.Fatalf("with an engine down: %d %s", code, body)
		}
	}

	idSeq := regexp.MustCompile(`127301\D{1,3}119877`)
	logs := map[string]string{"router": r.Proc.Output(), "e0": engines[0].Proc.Output(), "e1": engines[1].Proc.Output()}
	survivor := engines[1-holder].Name
	if !strings.Contains(logs["router"], "router listening") || !strings.Contains(logs[survivor], "ignoring vLLM flags") {
		t.Fatalf("the processes' output was not captured:\n%s\n%s", logs["router"], logs[survivor])
	}
	if !strings.Contains(logs["router"], "retrying on the next-best engine") {
		t.Fatalf("the failed attempt was not logged, so its log line was not checked:\n%s", logs["router"])
	}
	for name, out := range logs {
		for _, secret := range []string{promptMarker, engineKey, routerKey, hfToken} {
			if strings.Contains(out, secret) {
				t.Errorf("%s's output contains %q:\n%s", name, secret, out)
			}
		}
		if idSeq.MatchString(out) {
			t.Errorf("%s's output contains the prompt's token ids:\n%s", name, out)
		}
	}
}
