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
	"testing"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
)

// FuzzDecode checks that no input panics the decoder or yields events that break its own
// invariants. Seeds: testdata/fuzz/FuzzDecode plus the contract vectors. CI runs it briefly:
// go test -run='^$' -fuzz=FuzzDecode -fuzztime=20s ./internal/router/kvevents
func FuzzDecode(f *testing.F) {
	for _, v := range vectors {
		f.Add(mustHex(f, v))
	}
	var d kvevents.Decoder
	var b kvevents.Batch
	f.Fuzz(func(t *testing.T, p []byte) {
		if err := d.Decode(p, &b); err != nil {
			if len(b.Events) != 0 {
				t.Fatal("events left after an error")
			}
			return
		}
		for _, ev := range b.Events {
			if ev.Kind < kvevents.KindBlockStored || ev.Kind > kvevents.KindAllBlocksCleared {
				t.Fatalf("kind %d", ev.Kind)
			}
			if ev.Medium >= kvevents.NumMedia {
				t.Fatalf("medium %d", ev.Medium)
			}
			if ev.ExtraKeys != nil && len(ev.ExtraKeys) != len(ev.BlockHashes) {
				t.Fatal("extra keys not aligned with hashes")
			}
			for _, x := range ev.ExtraKeys {
				_ = kvevents.ExtraKeysDigest(x, ev.LoRAName)
			}
		}
	})
}
