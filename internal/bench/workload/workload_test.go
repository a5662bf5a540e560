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

package workload

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/sim/tokenizer"
)

func TestSegmentTextTokenizesToSegmentTokens(t *testing.T) {
	seg := Segment{Seed: 99, Len: 300}
	var b strings.Builder
	seg.AppendText(&b)
	got := tokenizer.New().Encode(b.String(), false)
	if !slices.Equal(got, seg.AppendTokens(nil)) {
		t.Fatalf("text of a segment must tokenize to its tokens (live and simulate must agree)")
	}
	short := Segment{Seed: 99, Len: 100}.AppendTokens(nil)
	if !slices.Equal(short, seg.AppendTokens(nil)[:100]) {
		t.Fatal("a shorter segment with the same seed must be a prefix")
	}
}

func spec(kind string) *Spec {
	s := &Spec{Name: "t", Kind: kind, Seed: 1, Fleet: Fleet{Engines: 2}, Load: Load{Rates: []float64{10}, Requests: 200},
		SLO: SLO{TTFTSeconds: 1, ITLSeconds: 0.1}}
	switch kind {
	case KindSharedPrefix:
		s.SharedPrefix = &SharedPrefix{Groups: 3, PromptsPerGroup: 2, SystemTokens: 100, QuestionTokens: 10, OutputTokens: 5}
	case KindMultiTurn:
		s.MultiTurn = &Sessions{SystemPrompts: 2, SystemTokens: 50, Turns: 4, FirstTokens: 10, NewTokens: 10, OutputTokens: 5, ThinkSeconds: 1}
	case KindSiblings:
		s.Siblings = &Siblings{N: 4, PromptTokens: 64, OutputTokens: 3}
	case KindZipf:
		s.Zipf = &PrefixMix{Prefixes: 20, S: 1.2, PrefixTokens: 64, SuffixTokens: 8, OutputTokens: 3}
	}
	return s
}

func TestGenerateIsDeterministicAndBounded(t *testing.T) {
	for _, k := range []string{KindSharedPrefix, KindMultiTurn, KindSiblings, KindZipf} {
		s := spec(k)
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		a, err := Generate(s, 10, Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Generate(s, 10, Options{})
		if len(a) != 200 || len(b) != 200 {
			t.Fatalf("%s: want 200 requests (the cap), got %d/%d", k, len(a), len(b))
		}
		for i := range a {
			if a[i].At != b[i].At || !slices.Equal(a[i].Tokens(), b[i].Tokens()) || a[i].Parent != b[i].Parent {
				t.Fatalf("%s: request %d differs between two generations with one seed", k, i)
			}
			if a[i].Parent >= i {
				t.Fatalf("%s: request %d continues a later request %d", k, i, a[i].Parent)
			}
		}
	}
}

func TestSharedPrefixSharesSystemPrompt(t *testing.T) {
	reqs, _ := Generate(spec(KindSharedPrefix), 10, Options{})
	groups := map[string][]uint32{}
	for _, r := range reqs {
		g := strings.SplitN(r.Session, "-", 2)[0]
		sys := r.Tokens()[:100]
		if prev, ok := groups[g]; ok && !slices.Equal(prev, sys) {
			t.Fatalf("group %s has two system prompts", g)
		}
		groups[g] = sys
	}
	if len(groups) != 3 {
		t.Fatalf("want 3 groups, got %d", len(groups))
	}
}

func TestSiblingsArriveTogether(t *testing.T) {
	reqs, _ := Generate(spec(KindSiblings), 10, Options{})
	for i := 0; i+3 < len(reqs); i += 4 {
		for j := 1; j < 4; j++ {
			if reqs[i+j].At != reqs[i].At || !slices.Equal(reqs[i+j].Tokens(), reqs[i].Tokens()) {
				t.Fatalf("burst at %d: sibling %d differs", i, j)
			}
		}
	}
}

func TestValidateRejectsBadSpecs(t *testing.T) {
	s := spec(KindSharedPrefix)
	s.SharedPrefix = nil
	if s.Validate() == nil {
		t.Fatal("a kind without its section must be rejected")
	}
	s = spec("nonsense")
	if s.Validate() == nil {
		t.Fatal("an unknown kind must be rejected")
	}
	s = spec(KindSharedPrefix)
	s.Load.Rates = []float64{-1}
	if s.Validate() == nil {
		t.Fatal("a negative rate must be rejected")
	}
}

func TestParseMooncake(t *testing.T) {
	in := `{"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 3000, "input_length": 600, "output_length": 7, "hash_ids": [0, 2]}
`
	recs, err := ParseMooncake(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].At != 0 || recs[1].At != 2 || recs[1].InputTokens != 600 || recs[1].HashIDs[1] != 2 {
		t.Fatalf("unexpected records %+v", recs)
	}
	if _, err := ParseMooncake(strings.NewReader(`{"timestamp": 1}`)); err == nil {
		t.Fatal("a record without lengths must be rejected")
	}
}

func TestMooncakeBlocksShareByHashID(t *testing.T) {
	dir := t.TempDir()
	in := `{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 10000, "input_length": 600, "output_length": 7, "hash_ids": [0, 2]}
`
	if err := os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Spec{Name: "t", Kind: KindTrace, Seed: 3, Fleet: Fleet{Engines: 1}, Load: Load{Rates: []float64{2}},
		SLO: SLO{TTFTSeconds: 1, ITLSeconds: 1}, Trace: &Trace{Format: "mooncake", File: "t.jsonl"}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	reqs, err := Generate(s, 2, Options{TracesDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	a, b := reqs[0].Tokens(), reqs[1].Tokens()
	if len(a) != 700 || len(b) != 600 || reqs[1].At != 5 {
		t.Fatalf("lengths %d/%d, second arrival %v (want 700/600, 5 at 2× speed)", len(a), len(b), reqs[1].At)
	}
	if !slices.Equal(a[:512], b[:512]) || slices.Equal(a[512:600], b[512:600]) {
		t.Fatal("equal hash ids must give equal blocks and different ids different ones")
	}
}

func TestParseAzure(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
	recs, err := ParseAzure(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[1].At < 4.31 || recs[1].At > 4.32 || recs[0].OutputTokens != 44 {
		t.Fatalf("unexpected records %+v", recs)
	}
	if _, err := ParseAzure(strings.NewReader("TIMESTAMP,ContextTokens,GeneratedTokens\nx,1,2\n")); err == nil {
		t.Fatal("a bad timestamp must be rejected")
	}
}

// The workload files shipped in bench/workloads must all load.
func TestShippedWorkloadsLoad(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "bench", "workloads")
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) < 10 {
		t.Fatalf("want the documented workload files in %s, found %d", dir, len(files))
	}
	for _, f := range files {
		if _, err := LoadFile(f); err != nil {
			t.Error(err)
		}
	}
}
