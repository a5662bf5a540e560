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

import (
	"container/list"
	"encoding/binary"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// ChainHashes returns the chained hashes of tokens in chunks of size (each hash covers its chunk
// and every chunk before it, like the peers' prefix hashes). With tail the last partial chunk is
// hashed too. maxChunks > 0 caps the count. The peers hash characters or tokens with xxhash64;
// kvbench's synthetic words are exactly 4 characters (" abc"), so a 128-character chunk is 32
// tokens and character granularity maps onto token granularity without loss.
func ChainHashes(tokens []uint32, size int, tail bool, maxChunks int) []uint64 {
	var out []uint64
	var prev uint64
	for i := 0; i < len(tokens); i += size {
		end := i + size
		if end > len(tokens) {
			if !tail {
				break
			}
			end = len(tokens)
		}
		if maxChunks > 0 && len(out) >= maxChunks {
			break
		}
		chunk := tokens[i:end]
		th := xxhash.Sum64(unsafe.Slice((*byte)(unsafe.Pointer(&chunk[0])), 4*len(chunk)))
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:8], prev)
		binary.LittleEndian.PutUint64(b[8:], th)
		prev = xxhash.Sum64(b[:])
		out = append(out, prev)
	}
	return out
}

// lruIndex is llm-d's approximate prefix index (docs/peer-policies.md §1.2): a global hash → pods
// map plus a per-pod LRU of block hashes; eviction from a pod's LRU removes the pod from the
// hash's set. It learns only from routing decisions, never from the engines.
type lruIndex struct {
	owners map[uint64]map[string]struct{}
	pods   map[string]*podLRU
}

type podLRU struct {
	ll *list.List
	at map[uint64]*list.Element
}

func newLRUIndex() *lruIndex {
	return &lruIndex{owners: map[uint64]map[string]struct{}{}, pods: map[string]*podLRU{}}
}

// add records that pod holds hashes, evicting its least recently used past capacity.
func (x *lruIndex) add(pod string, hashes []uint64, capacity int) {
	p := x.pods[pod]
	if p == nil {
		p = &podLRU{ll: list.New(), at: map[uint64]*list.Element{}}
		x.pods[pod] = p
	}
	for _, h := range hashes {
		if el, ok := p.at[h]; ok {
			p.ll.MoveToFront(el)
			continue
		}
		p.at[h] = p.ll.PushFront(h)
		o := x.owners[h]
		if o == nil {
			o = map[string]struct{}{}
			x.owners[h] = o
		}
		o[pod] = struct{}{}
	}
	for capacity > 0 && p.ll.Len() > capacity {
		el := p.ll.Back()
		h := el.Value.(uint64)
		p.ll.Remove(el)
		delete(p.at, h)
		if o := x.owners[h]; o != nil {
			delete(o, pod)
			if len(o) == 0 {
				delete(x.owners, h)
			}
		}
	}
}

// match walks hashes in order, stopping at the first one no pod holds; every pod holding hash i
// gets one block (llm-d's matchLongestPrefix: holes before that point are not penalised).
func (x *lruIndex) match(hashes []uint64) map[string]int {
	out := map[string]int{}
	for _, h := range hashes {
		o := x.owners[h]
		if len(o) == 0 {
			break
		}
		for pod := range o {
			out[pod]++
		}
	}
	return out
}
