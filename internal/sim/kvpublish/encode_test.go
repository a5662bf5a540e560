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

package kvpublish

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// Values of docs/vllm-contract.md §9 (a vLLM v0.26.0 capture).
const (
	vecTS   = 1789095808.8378847
	vecHash = uint64(15760518052499183552)
)

var vecTokens = []uint32{151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198, 151644, 77091, 198, 151667}

// The design note's vectors V1-V6, hex.
var vectors = map[string]string{
	"V1": "93cb41daa8dbe0359fe7918ba474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657391cfdab89baa" +
		"7b5857c0b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f696473dc0010ce0002505ccd0368ccc6cd23" +
		"68cd0176cd0117cd1a42cd013bcd15f01ece0002505dccc6ce0002505cce00012d23ccc6ce00025073aa626c6f636b5f" +
		"73697a6510a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c0aa65787472615f6b65797391" +
		"c0a967726f75705f69647800b26b765f63616368655f737065635f6b696e64ae66756c6c5f617474656e74696f6e00",
	"V2": "93cb41daa8dbe0359fe7919cab426c6f636b53746f72656491cfdab89baa7b5857c0c0dc0010ce0002505ccd0368ccc6" +
		"cd2368cd0176cd0117cd1a42cd013bcd15f01ece0002505dccc6ce0002505cce00012d23ccc6ce0002507310c0a34750" +
		"55c091c000ae66756c6c5f617474656e74696f6ec000",
	"V3": "93cb41daa8dbe0359fe79184a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cfdab89b" +
		"aa7b5857c0a66d656469756da3475055a967726f75705f6964780000",
	"V4": "93cb41daa8dbe0359fe79194ac426c6f636b52656d6f76656491cfdab89baa7b5857c0a34750550000",
	"V5": "93cb41daa8dbe0359fe79181a474797065b0416c6c426c6f636b73436c656172656400",
	"V6": "93cb41daa8dbe0359fe79191b0416c6c426c6f636b73436c656172656400",
}

// vecDigest is a 32-byte digest whose int form is vecHash (the int form is its last 8 bytes).
func vecDigest(t *testing.T) blockhash.Hash {
	b := bytes.Repeat([]byte{0xab}, 24)
	b = binary.BigEndian.AppendUint64(b, vecHash)
	h, err := blockhash.FromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func vecBatch(t *testing.T, kind kvevent.Kind) kvevent.Batch {
	ev := kvevent.Event{Kind: kind}
	switch kind {
	case kvevent.BlockStored:
		ev = kvevent.Event{Kind: kind, Hashes: []blockhash.Hash{vecDigest(t)}, Tokens: vecTokens, BlockSize: 16,
			ExtraKeys: [][]string{nil}, Medium: kvevent.MediumGPU}
	case kvevent.BlockRemoved:
		ev = kvevent.Event{Kind: kind, Hashes: []blockhash.Hash{vecDigest(t)}, Medium: kvevent.MediumGPU}
	}
	return kvevent.Batch{TS: vecTS, Events: []kvevent.Event{ev}}
}

func TestEncoderMatchesDesignVectors(t *testing.T) {
	cases := []struct {
		name string
		kind kvevent.Kind
		enc  Encoding
	}{
		{"V1", kvevent.BlockStored, Map}, {"V2", kvevent.BlockStored, Array},
		{"V3", kvevent.BlockRemoved, Map}, {"V4", kvevent.BlockRemoved, Array},
		{"V5", kvevent.AllBlocksCleared, Map}, {"V6", kvevent.AllBlocksCleared, Array},
	}
	for _, c := range cases {
		got := Encoder{Encoding: c.enc, IntHashes: true}.Append(nil, vecBatch(t, c.kind))
		if want := vectors[c.name]; hex.EncodeToString(got) != want {
			t.Errorf("%s:\n got %x\nwant %s", c.name, got, want)
		}
	}
}

// goldenCases cover both encodings and both hash forms with a multi-block event that has a
// parent, a LoRA name and extra keys (including a cache salt on block 0).
func goldenBatch(t *testing.T) kvevent.Batch {
	h, _ := blockhash.New(blockhash.SHA256CBOR, new(string))
	toks := make([]uint32, 48)
	for i := range toks {
		toks[i] = uint32(i * 4099)
	}
	parent := h.Block(blockhash.Hash{}, toks[:16], nil)
	hashes := h.Chain(parent, toks[16:], 16, func(i int) []string { return blockhash.ExtraKeys("adapter-a", "", i+1) })
	return kvevent.Batch{TS: 1700000000.25, DPRank: 3, Events: []kvevent.Event{
		{Kind: kvevent.BlockStored, Hashes: hashes, Parent: parent, Tokens: toks[16:], BlockSize: 16, LoRAName: "adapter-a",
			ExtraKeys: [][]string{{"adapter-a"}, {"adapter-a", "salt"}}, Medium: kvevent.MediumGPU},
		{Kind: kvevent.BlockRemoved, Hashes: hashes[:1], Medium: kvevent.MediumGPU},
		{Kind: kvevent.AllBlocksCleared},
	}}
}

func TestGoldenFilesDecodeIndependently(t *testing.T) {
	b := goldenBatch(t)
	for _, enc := range []Encoding{Map, Array} {
		for _, ints := range []bool{true, false} {
			name := enc.String() + "-" + map[bool]string{true: "int", false: "bytes"}[ints] + ".msgpack"
			got := Encoder{Encoding: enc, IntHashes: ints}.Append(nil, b)
			path := filepath.Join("testdata", name)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update once to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: encoder output changed:\n got %x\nwant %x", name, got, want)
			}
			checkDecoded(t, name, want, b, enc, ints)
		}
	}
}

// checkDecoded decodes payload with vmihailenco/msgpack into generic values and checks every field
// against the batch it came from.
func checkDecoded(t *testing.T, name string, payload []byte, b kvevent.Batch, enc Encoding, ints bool) {
	t.Helper()
	var top []any
	if err := msgpack.Unmarshal(payload, &top); err != nil {
		t.Fatalf("%s: decode: %v", name, err)
	}
	if len(top) != 3 || top[0] != b.TS || toUint(top[2]) != uint64(b.DPRank) {
		t.Fatalf("%s: envelope %v", name, top)
	}
	events := top[1].([]any)
	if len(events) != len(b.Events) {
		t.Fatalf("%s: %d events", name, len(events))
	}
	hashVal := func(h blockhash.Hash) any {
		if ints {
			return h.Uint64()
		}
		return h.Bytes()
	}
	normHash := func(v any) any {
		if ints {
			return toUint(v)
		}
		return v
	}
	for i, raw := range events {
		ev := b.Events[i]
		fields := asMap(t, raw, enc, ev.Kind)
		switch ev.Kind {
		case kvevent.BlockStored:
			hs := fields["block_hashes"].([]any)
			for j, h := range ev.Hashes {
				if !reflect.DeepEqual(normHash(hs[j]), hashVal(h)) {
					t.Errorf("%s: hash %d = %v", name, j, hs[j])
				}
			}
			if !reflect.DeepEqual(normHash(fields["parent_block_hash"]), hashVal(ev.Parent)) {
				t.Errorf("%s: parent = %v", name, fields["parent_block_hash"])
			}
			toks := fields["token_ids"].([]any)
			for j, tok := range ev.Tokens {
				if toUint(toks[j]) != uint64(tok) {
					t.Fatalf("%s: token %d = %v", name, j, toks[j])
				}
			}
			if toUint(fields["block_size"]) != 16 || fields["medium"] != "GPU" || fields["lora_name"] != "adapter-a" ||
				fields["lora_id"] != nil || toUint(fields["group_idx"]) != 0 || fields["kv_cache_spec_kind"] != "full_attention" {
				t.Errorf("%s: scalar fields %v", name, fields)
			}
			ek := fields["extra_keys"].([]any)
			if len(ek) != 2 || !reflect.DeepEqual(ek[1], []any{"adapter-a", "salt"}) {
				t.Errorf("%s: extra_keys %v", name, ek)
			}
		case kvevent.BlockRemoved:
			hs := fields["block_hashes"].([]any)
			if len(hs) != 1 || !reflect.DeepEqual(normHash(hs[0]), hashVal(ev.Hashes[0])) || fields["medium"] != "GPU" {
				t.Errorf("%s: removed %v", name, fields)
			}
		}
	}
}

var arrayFields = map[kvevent.Kind][]string{
	kvevent.BlockStored: {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
		"lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"},
	kvevent.BlockRemoved:     {"type", "block_hashes", "medium", "group_idx"},
	kvevent.AllBlocksCleared: {"type"},
}

var tags = map[kvevent.Kind]string{kvevent.BlockStored: "BlockStored", kvevent.BlockRemoved: "BlockRemoved", kvevent.AllBlocksCleared: "AllBlocksCleared"}

// asMap turns either event form into a field map, checking the tag and the legacy array length.
func asMap(t *testing.T, raw any, enc Encoding, kind kvevent.Kind) map[string]any {
	t.Helper()
	out := map[string]any{}
	if enc == Array {
		arr, ok := raw.([]any)
		if !ok || len(arr) != len(arrayFields[kind]) {
			t.Fatalf("array event %v: want %d elements", raw, len(arrayFields[kind]))
		}
		for i, f := range arrayFields[kind] {
			out[f] = arr[i]
		}
	} else {
		m, ok := raw.(map[string]any)
		if !ok {
			t.Fatalf("map event is %T", raw)
		}
		out = m
	}
	if out["type"] != tags[kind] {
		t.Fatalf("tag %v, want %s", out["type"], tags[kind])
	}
	return out
}

func toUint(v any) uint64 {
	switch x := v.(type) {
	case int8:
		return uint64(x)
	case int16:
		return uint64(x)
	case int32:
		return uint64(x)
	case int64:
		return uint64(x)
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	}
	return ^uint64(0)
}

func TestParseEncoding(t *testing.T) {
	for in, want := range map[string]Encoding{"": Map, "map": Map, "array": Array} {
		if got, err := ParseEncoding(in); err != nil || got != want {
			t.Errorf("ParseEncoding(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseEncoding("tuple"); err == nil || !strings.Contains(err.Error(), "tuple") {
		t.Error("bad encoding accepted")
	}
}

func BenchmarkEncodeStep(b *testing.B) {
	h, _ := blockhash.New(blockhash.SHA256CBOR, new(string))
	toks := make([]uint32, 16*32)
	hashes := h.Chain(blockhash.Hash{}, toks, 16, nil)
	batch := kvevent.Batch{TS: 1, Events: []kvevent.Event{{Kind: kvevent.BlockStored, Hashes: hashes, Tokens: toks, BlockSize: 16, Medium: "GPU"}}}
	enc := Encoder{Encoding: Map, IntHashes: true}
	buf := make([]byte, 0, 8192)
	b.ReportAllocs()
	b.SetBytes(int64(len(enc.Append(nil, batch))))
	for b.Loop() {
		buf = enc.Append(buf[:0], batch)
	}
}
