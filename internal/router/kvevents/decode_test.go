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

package kvevents_test

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvevents/kveventstest"
)

// Vectors V1–V6 of docs/vllm-contract.md §9 (derived from a vLLM v0.26.0 capture).
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

const vecHash = 15760518052499183552

var vecTokens = []uint32{151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198, 151644, 77091, 198, 151667}

func mustHex(t testing.TB, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestContractVectors(t *testing.T) {
	var d kvevents.Decoder
	var b kvevents.Batch
	for _, name := range []string{"V1", "V2"} {
		if err := d.Decode(mustHex(t, vectors[name]), &b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b.TS < 1789095808.83 || b.TS > 1789095808.84 || !b.HasRank || b.DataParallelRank != 0 {
			t.Fatalf("%s: batch header ts=%v rank=%v/%v", name, b.TS, b.DataParallelRank, b.HasRank)
		}
		if len(b.Events) != 1 {
			t.Fatalf("%s: %d events", name, len(b.Events))
		}
		ev := b.Events[0]
		if ev.Kind != kvevents.KindBlockStored || len(ev.BlockHashes) != 1 || ev.BlockHashes[0] != vecHash ||
			ev.HasParent || ev.BlockSize != 16 || ev.Medium != kvevents.MediumGPU || ev.LoRAName != "" ||
			ev.SpecKind != kvevents.SpecFullAttention || len(ev.ExtraKeys) != 1 || ev.ExtraKeys[0] != nil {
			t.Fatalf("%s: event %+v", name, ev)
		}
		if len(ev.TokenIDs) != 16 {
			t.Fatalf("%s: %d tokens", name, len(ev.TokenIDs))
		}
		for i, tok := range vecTokens {
			if ev.TokenIDs[i] != tok {
				t.Fatalf("%s: token %d = %d, want %d", name, i, ev.TokenIDs[i], tok)
			}
		}
	}
	for _, name := range []string{"V3", "V4"} {
		if err := d.Decode(mustHex(t, vectors[name]), &b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(b.Events) != 1 || b.Events[0].Kind != kvevents.KindBlockRemoved ||
			b.Events[0].BlockHashes[0] != vecHash || b.Events[0].Medium != kvevents.MediumGPU {
			t.Fatalf("%s: %+v", name, b.Events)
		}
	}
	for _, name := range []string{"V5", "V6"} {
		if err := d.Decode(mustHex(t, vectors[name]), &b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(b.Events) != 1 || b.Events[0].Kind != kvevents.KindAllBlocksCleared {
			t.Fatalf("%s: %+v", name, b.Events)
		}
	}
}

func marshal(t testing.TB, v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWireVariants covers shapes other than msgspec's defaults: any integer width, negative and
// bytes hashes, a 2-element batch (vLLM < 0.9.1), a map batch, unknown fields and trailing
// elements, SGLang's bigram tokens and media names.
func TestWireVariants(t *testing.T) {
	hashBytes := make([]byte, 32)
	for i := range hashBytes {
		hashBytes[i] = byte(i)
	}
	cases := []struct {
		name    string
		payload any
		check   func(t *testing.T, b *kvevents.Batch)
	}{
		{"two-element batch, negative hash, uint64 tokens", []any{1.5, []any{
			[]any{"BlockStored", []any{int64(-2)}, nil, []any{uint64(1), uint64(2)}, 2, nil},
		}}, func(t *testing.T, b *kvevents.Batch) {
			ev := b.Events[0]
			if b.HasRank || ev.BlockHashes[0] != ^uint64(1) || ev.TokenIDs[1] != 2 || ev.BlockSize != 2 {
				t.Fatalf("%+v %+v", b, ev)
			}
		}},
		{"bytes hashes take the last 8 bytes", []any{1.0, []any{
			map[string]any{"type": "BlockStored", "block_hashes": []any{hashBytes}, "parent_block_hash": []byte{1, 2},
				"token_ids": []any{int8(5)}, "block_size": 1, "medium": "cpu_pinned", "future_field": []any{1, 2}},
		}, 3, "trailing"}, func(t *testing.T, b *kvevents.Batch) {
			ev := b.Events[0]
			if ev.BlockHashes[0] != 0x18191a1b1c1d1e1f || !ev.HasParent || ev.ParentHash != 0x0102 ||
				ev.Medium != kvevents.MediumCPU || b.DataParallelRank != 3 {
				t.Fatalf("%+v %+v", b, ev)
			}
		}},
		{"map batch, attn_dp_rank, storage media", map[string]any{"ts": 2.0, "attn_dp_rank": 1, "events": []any{
			[]any{"BlockRemoved", []any{uint32(7)}, "STORAGE"},
			[]any{"BlockRemoved", []any{uint32(8)}, "DISK", 0, "extra"},
			[]any{"BlockRemoved", []any{uint32(9)}, "FS"},
		}}, func(t *testing.T, b *kvevents.Batch) {
			if b.DataParallelRank != 1 || len(b.Events) != 3 {
				t.Fatalf("%+v", b)
			}
			for _, ev := range b.Events {
				if ev.Medium != kvevents.MediumStorage {
					t.Fatalf("%+v", ev)
				}
			}
		}},
		{"SGLang bigram tokens and metadata map", []any{1.0, []any{
			[]any{"BlockStored", []any{int64(-5)}, int64(-6), []any{[]any{10, 11}, []any{11, 12}}, 2, nil, "CPU_TIER1",
				map[string]any{"cache_salt": "x"}},
		}, 0}, func(t *testing.T, b *kvevents.Batch) {
			ev := b.Events[0]
			if len(ev.TokenIDs) != 2 || ev.TokenIDs[0] != 10 || ev.TokenIDs[1] != 11 || ev.LoRAName != "" ||
				ev.ParentHash != uint64(0xfffffffffffffffa) || ev.Medium != kvevents.MediumCPU {
				t.Fatalf("%+v", ev)
			}
		}},
		{"unknown tags and non-events are skipped", []any{1.0, []any{
			[]any{"BlockPinned", []any{1}}, 42, map[string]any{"type": "Future"},
			[]any{"AllBlocksCleared"},
		}, 0}, func(t *testing.T, b *kvevents.Batch) {
			if len(b.Events) != 1 || b.Events[0].Kind != kvevents.KindAllBlocksCleared {
				t.Fatalf("%+v", b.Events)
			}
		}},
		{"LoRA, extra keys and sliding window", []any{1.0, []any{
			map[string]any{"type": "BlockStored", "block_hashes": []any{1, 2}, "parent_block_hash": nil,
				"token_ids": []any{1, 2}, "block_size": 1, "lora_name": "ad", "extra_keys": []any{[]any{"ad", "salt"}, []any{"ad"}},
				"kv_cache_spec_kind": "sliding_window", "group_idx": 1},
		}, 0}, func(t *testing.T, b *kvevents.Batch) {
			ev := b.Events[0]
			if ev.LoRAName != "ad" || len(ev.ExtraKeys) != 2 || ev.SpecKind != kvevents.SpecOther || ev.GroupIdx != 1 {
				t.Fatalf("%+v", ev)
			}
			if got, want := kvevents.ExtraKeysDigest(ev.ExtraKeys[0], "ad"), kvevents.SaltDigest("salt"); got != want {
				t.Fatalf("salt digest %x, want %x", got, want)
			}
			if got := kvevents.ExtraKeysDigest(ev.ExtraKeys[1], "ad"); got != 0 {
				t.Fatalf("LoRA-only tuple digest %x, want 0", got)
			}
		}},
	}
	var d kvevents.Decoder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b kvevents.Batch
			if err := d.Decode(marshal(t, c.payload), &b); err != nil {
				t.Fatal(err)
			}
			c.check(t, &b)
		})
	}
}

func TestEncoderRoundTrip(t *testing.T) {
	parent := uint64(1 << 63)
	for _, mapForm := range []bool{false, true} {
		p := kveventstest.Batch(3.25, 2, mapForm,
			kveventstest.Stored{Hashes: []uint64{5, 6}, Parent: &parent, Tokens: []uint32{1, 2, 300, 70000},
				BlockSize: 2, Medium: "GPU", LoRAName: "l", ExtraKeys: [][]string{{"l", "s"}, nil}},
			kveventstest.Removed{Hashes: []uint64{5}, Medium: "CPU"},
			kveventstest.Cleared{})
		var d kvevents.Decoder
		var b kvevents.Batch
		if err := d.Decode(p, &b); err != nil {
			t.Fatal(err)
		}
		if len(b.Events) != 3 || b.DataParallelRank != 2 || b.TS != 3.25 {
			t.Fatalf("map=%v: %+v", mapForm, b)
		}
		st := b.Events[0]
		if st.ParentHash != parent || st.TokenIDs[3] != 70000 || st.LoRAName != "l" || st.ExtraKeys[1] != nil ||
			kvevents.ExtraKeysDigest(st.ExtraKeys[0], "l") != kvevents.SaltDigest("s") {
			t.Fatalf("map=%v: %+v", mapForm, st)
		}
		if b.Events[1].Medium != kvevents.MediumCPU || b.Events[2].Kind != kvevents.KindAllBlocksCleared {
			t.Fatalf("map=%v: %+v", mapForm, b.Events)
		}
	}
}

func TestMalformedIsCountedNotPanicking(t *testing.T) {
	m := kvevents.NewMetrics()
	d := kvevents.Decoder{Metrics: m}
	v1 := mustHex(t, vectors["V1"])
	bad := [][]byte{
		nil, {0xc1}, {0x91, 0x01}, v1[:len(v1)-1], append(append([]byte{}, v1...), 0),
		{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff}, // huge array header
		{0x93, 0xa1, 'x', 0x90, 0x00},                                      // ts not a number
	}
	var b kvevents.Batch
	for i, p := range bad {
		err := d.Decode(p, &b)
		if !errors.Is(err, kvevents.ErrMalformed) {
			t.Fatalf("payload %d: err %v, want ErrMalformed", i, err)
		}
		if len(b.Events) != 0 {
			t.Fatalf("payload %d: events left after error", i)
		}
	}
	var sb strings.Builder
	if n := testutilCount(t, m); n != float64(len(bad)) {
		t.Fatalf("malformed counter %v, want %d (%s)", n, len(bad), sb.String())
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	p := kveventstest.Batch(1, 0, true, kveventstest.Stored{
		Hashes: make([]uint64, 32), Tokens: make([]uint32, 32*16), BlockSize: 16, Medium: "GPU",
		ExtraKeys: make([][]string, 32)})
	var d kvevents.Decoder
	var b kvevents.Batch
	if err := d.Decode(p, &b); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = d.Decode(p, &b) }); n != 0 {
		t.Fatalf("Decode allocates %v times per batch", n)
	}
}

func TestParseMedium(t *testing.T) {
	for in, want := range map[string]kvevents.Medium{
		"": kvevents.MediumGPU, "GPU": kvevents.MediumGPU, "gpu": kvevents.MediumGPU, "CPU": kvevents.MediumCPU,
		"CPU_TIER2": kvevents.MediumCPU, "OBJ": kvevents.MediumStorage, "EXTERNAL": kvevents.MediumStorage,
	} {
		if got := kvevents.ParseMedium([]byte(in)); got != want {
			t.Errorf("ParseMedium(%q) = %v, want %v", in, got, want)
		}
	}
}
