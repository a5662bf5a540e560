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

package blockhash

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func mustNew(t *testing.T, algo, seed string) *Hasher {
	t.Helper()
	h, err := New(algo, &seed)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The V8 vectors of docs/vllm-contract.md §9.
func TestSHA256CBORVectors(t *testing.T) {
	h := mustNew(t, SHA256CBOR, "0")
	if got := h.NoneHash().String(); got != "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e" {
		t.Fatalf("NONE_HASH(seed 0) = %s", got)
	}
	b1 := h.Block(Hash{}, seq(1, 16), nil)
	if got := b1.String(); got != "202da172482d928bbc42ab25b0151e2b895f13f41002e27b2ceabcfae6d332ea" {
		t.Fatalf("block1 = %s", got)
	}
	if b1.Uint64() != 3236607068019569386 {
		t.Fatalf("block1 int = %d", b1.Uint64())
	}
	b2 := h.Block(b1, seq(17, 16), nil)
	if got := b2.String(); got != "4a0a393805c6d2f0ed831000d41bb65980336c4c04895d5e26470bbec927f5bf" || b2.Uint64() != 2758186210834249151 {
		t.Fatalf("block2 = %s (%d)", got, b2.Uint64())
	}
	lora := h.Block(Hash{}, seq(1, 16), []string{"my-lora"})
	if lora.String() != "07df9ef1b6800860b8c8d385e23a8a5b0eba8e3b5390de25d657793dd7c611fd" || lora.Uint64() != 15444946753610453501 {
		t.Fatalf("lora block = %s (%d)", lora, lora.Uint64())
	}
	if salt := h.Block(Hash{}, seq(1, 16), []string{"salt-abc"}); salt.Uint64() != 1970912806063691392 {
		t.Fatalf("salt block int = %d", salt.Uint64())
	}

	h10 := mustNew(t, SHA256CBOR, "10")
	if got := h10.NoneHash().String(); got != "087f4c7109d76636536c712c5121252018fa2dd0fddeba804f1df78494d8ea01" {
		t.Fatalf("NONE_HASH(seed 10) = %s", got)
	}
	chain := h10.Chain(Hash{}, seq(1, 40), 16, nil)
	if len(chain) != 2 || chain[0].Uint64() != 3503399340458755567 || chain[1].Uint64() != 11210948865854066883 {
		t.Fatalf("seed 10 chain = %v", chain)
	}
}

// The hand-written encoder must produce exactly what a canonical CBOR library produces, for every
// integer width and key shape the engine can feed it.
func TestEncodingMatchesCanonicalCBOR(t *testing.T) {
	em, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	widths := []uint32{0, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1}
	for i := 0; i < 300; i++ {
		algo := SHA256CBOR
		if i%2 == 1 {
			algo = XXHashCBOR
		}
		h := mustNew(t, algo, "0")
		n := r.IntN(40)
		toks := make([]uint32, n)
		for j := range toks {
			if r.IntN(3) == 0 {
				toks[j] = widths[r.IntN(len(widths))]
			} else {
				toks[j] = r.Uint32()
			}
		}
		var extra []string
		for j := r.IntN(3); j > 0; j-- {
			extra = append(extra, string(bytes.Repeat([]byte("k"), r.IntN(300))))
		}
		parent := h.Block(Hash{}, seq(i, 3), nil)
		got := h.Block(parent, toks, extra)

		var ek any // nil encodes as null, like Python's None
		if len(extra) > 0 {
			ek = extra
		}
		enc, err := em.Marshal([]any{parent.Bytes(), toks, ek})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(h.buf, enc) {
			t.Fatalf("case %d: hand CBOR %x != canonical %x", i, h.buf, enc)
		}
		if algo == SHA256CBOR {
			want := sha256.Sum256(enc)
			if !bytes.Equal(got.Bytes(), want[:]) {
				t.Fatalf("case %d: digest mismatch", i)
			}
		} else if len(got.Bytes()) != 16 {
			t.Fatalf("xxhash digest has %d bytes", len(got.Bytes()))
		}
	}
}

func TestUnsetSeedIsRandomAndAlgorithmsMap(t *testing.T) {
	a, _ := New(SHA256CBOR, nil)
	b, _ := New(SHA256CBOR, nil)
	if a.NoneHash() == b.NoneHash() {
		t.Fatal("unset PYTHONHASHSEED must give a random NONE_HASH per hasher")
	}
	for in, want := range map[string]string{"sha256": SHA256CBOR, "xxhash": XXHashCBOR, "xxhash_cbor": XXHashCBOR, "sha256_cbor": SHA256CBOR} {
		got, _, err := Canonical(in)
		if err != nil || got != want {
			t.Fatalf("Canonical(%q) = %q, %v", in, got, err)
		}
	}
	if _, _, err := Canonical("md5"); err == nil {
		t.Fatal("unknown algorithm accepted")
	}
	// xxh3-128 of the empty input is a published constant: 99aa06d3014798d86001c324468d497f.
	x := mustNew(t, XXHashCBOR, "0")
	if got := hex.EncodeToString(x.digest(nil).Bytes()); got != "99aa06d3014798d86001c324468d497f" {
		t.Fatalf("xxh3_128(empty) = %s", got)
	}
}

func TestExtraKeys(t *testing.T) {
	if ExtraKeys("", "", 0) != nil {
		t.Fatal("no keys should be nil")
	}
	if got := ExtraKeys("l", "s", 0); len(got) != 2 || got[0] != "l" || got[1] != "s" {
		t.Fatalf("first block keys = %v", got)
	}
	if got := ExtraKeys("l", "s", 1); len(got) != 1 || got[0] != "l" {
		t.Fatalf("later block keys = %v", got)
	}
}

func BenchmarkBlockSHA256CBOR(b *testing.B) {
	h, _ := New(SHA256CBOR, new(string))
	toks := seq(1000, 16)
	var p Hash
	b.ReportAllocs()
	for b.Loop() {
		p = h.Block(p, toks, nil)
	}
}
