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

package peers

import "testing"

func newKVRouter(t *testing.T) *kvrouter {
	t.Helper()
	f, err := Select([]string{"kvrouter"})
	if err != nil {
		t.Fatal(err)
	}
	return f[0].New(env()).(*kvrouter)
}

func TestKVRouterPickWithoutEndpoints(t *testing.T) {
	p := newKVRouter(t)
	// No panic; the harness never routes with no endpoint, but a picker must not index one.
	_ = p.Pick(&Request{ID: 1, Tokens: toks(1, 64), MaxTokens: 10, Adapter: "sql"}, nil)
	if p.last.Endpoint != "" {
		t.Fatalf("decided %q with no endpoint", p.last.Endpoint)
	}
}

// As the router: a request whose adapter was not active where it went does not feed the TTFT
// model (its first token included the adapter's slot wait and load).
func TestKVRouterSkipsColdAdapterTTFT(t *testing.T) {
	p := newKVRouter(t)
	e := eps(1)
	e[0].MaxLoRAs = 2
	observations := func() int {
		if m := p.pol.Model(e[0].Name); m != nil {
			return m.Observations()
		}
		return 0
	}
	send := func(id int, adapter string) {
		r := &Request{ID: id, Tokens: toks(uint32(id), 64), MaxTokens: 10, Adapter: adapter}
		route(p, r, e)
		p.FirstToken(r, e[0].Name, 2.5)
		p.Finished(r, e[0].Name)
	}
	send(1, "sql") // loaded for this request
	if n := observations(); n != 0 {
		t.Fatalf("cold adapter TTFT observed: %d", n)
	}
	send(2, "sql") // in a slot now
	send(3, "")
	if n := observations(); n != 2 {
		t.Fatalf("warm adapter and base-model TTFTs: %d observations, want 2", n)
	}
}
