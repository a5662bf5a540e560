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

package engine

import (
	"math"
	"testing"
)

// A MaxTokens beyond the context (up to the largest int) is not an error for the core, which
// stops the request at the context length; nothing is sized by MaxTokens (the server refuses
// such requests before, as vLLM does, but the core must not overflow if one gets here).
func TestHugeMaxTokensStopsAtContextLength(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxModelLen = 200 })
	r := &Request{ID: "a", Prompt: tokens(1, 40), MaxTokens: math.MaxInt, Seed: 1}
	if err := e.Submit(r); err != nil {
		t.Fatal(err)
	}
	runAll(t, e)
	if len(r.Output) != 200-40 {
		t.Fatalf("%d outputs, want %d (up to the context length)", len(r.Output), 200-40)
	}
}
