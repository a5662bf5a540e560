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

package simulate

import (
	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
)

// toBatch converts the simulator's KV events into the decoded form the index ingests, exactly
// what internal/router/kvevents would produce from the published msgpack (integer block hashes, GPU
// medium), without the encode/decode round trip that live mode pays.
func toBatch(evs []kvevent.Event, ts float64) *kvevents.Batch {
	b := &kvevents.Batch{TS: ts, Events: make([]kvevents.Event, 0, len(evs))}
	for i := range evs {
		e := &evs[i]
		ke := kvevents.Event{BlockSize: e.BlockSize, LoRAName: e.LoRAName, TokenIDs: e.Tokens, Medium: kvevents.MediumGPU}
		switch e.Kind {
		case kvevent.BlockStored:
			ke.Kind = kvevents.KindBlockStored
		case kvevent.BlockRemoved:
			ke.Kind = kvevents.KindBlockRemoved
		case kvevent.AllBlocksCleared:
			ke.Kind = kvevents.KindAllBlocksCleared
		default:
			continue
		}
		ke.BlockHashes = make([]uint64, len(e.Hashes))
		for j, h := range e.Hashes {
			ke.BlockHashes[j] = h.Uint64()
		}
		if !e.Parent.IsZero() {
			ke.ParentHash, ke.HasParent = e.Parent.Uint64(), true
		}
		b.Events = append(b.Events, ke)
	}
	return b
}
