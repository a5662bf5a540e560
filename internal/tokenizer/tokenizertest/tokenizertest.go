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

// Package tokenizertest hands other packages' tests the tokenizer fixtures of internal/tokenizer,
// so the router and the simulator tokenize with the very files whose ids the tokenizer's own tests
// check against the reference. It is shared like internal/tokenizer, for tests only.
package tokenizertest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// Models are the fixture names Dir and Load accept.
var Models = []string{"llama3", "qwen2_5"}

// Dir returns the fixture directory of a model ("llama3" or "qwen2_5"): a pruned tokenizer.json
// (every added token and setting, the vocabulary and merges the fixture corpus uses; other text
// still tokenizes, mostly into byte-level pieces) and the model's tokenizer_config.json.
func Dir(t testing.TB, model string) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("tokenizertest: cannot locate the fixtures")
	}
	dir := filepath.Join(filepath.Dir(filepath.Dir(file)), "testdata", model)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatalf("tokenizertest: no fixture %q: %v", model, err)
	}
	return dir
}

// Load loads a model's fixture.
func Load(t testing.TB, model string) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.LoadDir(Dir(t, model))
	if err != nil {
		t.Fatalf("tokenizertest: %v", err)
	}
	return tok
}
