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

package kvevents

import (
	"errors"
	"math"
)

// ErrMalformed wraps every decoding failure; the message says what was wrong and where.
var ErrMalformed = errors.New("malformed kv event batch")

// Decoder decodes event batches. It is not safe for concurrent use: give each subscriber its own.
// The zero value is ready; set Metrics to count malformed payloads and skipped events.
type Decoder struct {
	// Metrics, if set, counts malformed payloads and skipped events.
	Metrics *Metrics
	// loras interns LoRA names so events do not allocate a string each.
	loras map[string]string
	r     reader
}

// Skip reasons (metric label values).
const (
	reasonUnknownTag = "unknown_tag"
	reasonBadEvent   = "bad_event"
)

// Decode decodes one msgpack payload into b, reusing b's buffers. Events with an unknown tag or
// a shape that cannot be an event are skipped (counted); unknown fields and trailing elements
// are ignored. On error b holds no events and the error wraps ErrMalformed.
func (d *Decoder) Decode(payload []byte, b *Batch) error {
	b.reset()
	d.r = reader{buf: payload}
	r := &d.r
	switch r.peek() {
	case tArray:
		n := r.arrayLen()
		if n < 2 {
			r.fail("batch has %d elements, want 2 or 3", n)
			break
		}
		b.TS = r.float()
		d.events(b)
		if n >= 3 {
			if !r.nilNext() {
				b.DataParallelRank = r.smallInt()
				b.HasRank = true
			}
			for i := 3; i < n; i++ {
				r.skip()
			}
		}
	case tMap:
		// Defensive: one vLLM snapshot encodes the batch as a map (docs/vllm-contract.md §1.1).
		n := r.mapLen()
		seenEvents := false
		for i := 0; i < n && r.err == nil; i++ {
			switch string(r.strOrBin()) {
			case "ts":
				b.TS = r.float()
			case "events":
				d.events(b)
				seenEvents = true
			case "data_parallel_rank", "attn_dp_rank":
				if !r.nilNext() {
					b.DataParallelRank = r.smallInt()
					b.HasRank = true
				}
			default:
				r.skip()
			}
		}
		if !seenEvents {
			r.fail("map batch without events")
		}
	default:
		r.fail("batch is neither array nor map")
	}
	if r.err == nil && r.pos != len(payload) {
		r.fail("%d trailing bytes", len(payload)-r.pos)
	}
	if r.err != nil {
		err := r.err
		b.reset()
		if d.Metrics != nil {
			d.Metrics.malformed.WithLabelValues("decode").Inc()
		}
		d.r = reader{}
		return err
	}
	d.r = reader{}
	return nil
}

func (b *Batch) reset() {
	b.TS, b.DataParallelRank, b.HasRank = 0, 0, false
	b.Events = b.Events[:0]
	b.hashes = b.hashes[:0]
	b.tokens = b.tokens[:0]
	b.extras = b.extras[:0]
}

func (d *Decoder) skipped(reason string) {
	if d.Metrics != nil {
		d.Metrics.skipped.WithLabelValues(reason).Inc()
	}
}

func (d *Decoder) events(b *Batch) {
	r := &d.r
	n := r.arrayLen()
	for i := 0; i < n && r.err == nil; i++ {
		b.Events = append(b.Events, Event{})
		ev := &b.Events[len(b.Events)-1]
		var ok bool
		switch r.peek() {
		case tArray:
			ok = d.arrayEvent(b, ev)
		case tMap:
			ok = d.mapEvent(b, ev)
		default:
			r.skip()
			d.skipped(reasonBadEvent)
		}
		if !ok {
			b.Events = b.Events[:len(b.Events)-1]
		}
	}
}

func tagKind(tag []byte) Kind {
	switch string(tag) {
	case "BlockStored":
		return KindBlockStored
	case "BlockRemoved":
		return KindBlockRemoved
	case "AllBlocksCleared":
		return KindAllBlocksCleared
	}
	return 0
}

// arrayEvent decodes the legacy positional form. Field positions come from vLLM's declaration
// order (docs/vllm-contract.md §1.2/§1.3); a field of an unexpected type (SGLang's metadata map where
// vLLM has lora_name) is skipped rather than failing the batch.
func (d *Decoder) arrayEvent(b *Batch, ev *Event) bool {
	r := &d.r
	n := r.arrayLen()
	if n == 0 || r.peek() != tStr {
		for i := 0; i < n; i++ {
			r.skip()
		}
		d.skipped(reasonBadEvent)
		return false
	}
	ev.Kind = tagKind(r.str())
	var fields []string
	switch ev.Kind {
	case KindBlockStored:
		fields = storedFields
	case KindBlockRemoved:
		fields = removedFields
	case KindAllBlocksCleared:
	default:
		for i := 1; i < n; i++ {
			r.skip()
		}
		d.skipped(reasonUnknownTag)
		return false
	}
	valid := true
	for i := 1; i < n && r.err == nil; i++ {
		if i-1 < len(fields) {
			valid = d.field(b, ev, fields[i-1]) && valid
		} else {
			r.skip()
		}
	}
	return d.finish(ev, valid)
}

var (
	storedFields = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size",
		"lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
		"kv_cache_spec_sliding_window"}
	removedFields = []string{"block_hashes", "medium", "group_idx"}
)

func (d *Decoder) mapEvent(b *Batch, ev *Event) bool {
	r := &d.r
	n := r.mapLen()
	valid := true
	for i := 0; i < n && r.err == nil; i++ {
		if t := r.peek(); t != tStr && t != tBin {
			r.skip()
			r.skip()
			valid = false
			continue
		}
		key := r.strOrBin()
		if string(key) == "type" {
			if r.peek() != tStr {
				r.skip()
				valid = false
				continue
			}
			ev.Kind = tagKind(r.str())
			continue
		}
		valid = d.field(b, ev, string(key)) && valid
	}
	if r.err == nil && ev.Kind == 0 {
		d.skipped(reasonUnknownTag)
		return false
	}
	return d.finish(ev, valid)
}

func (d *Decoder) finish(ev *Event, valid bool) bool {
	if d.r.err != nil {
		return false
	}
	if !valid || (ev.Kind != KindAllBlocksCleared && len(ev.BlockHashes) == 0) ||
		(ev.ExtraKeys != nil && len(ev.ExtraKeys) != len(ev.BlockHashes)) {
		d.skipped(reasonBadEvent)
		return false
	}
	return true
}

// field decodes one named event field. It returns false when the value has a shape the field
// cannot take (the event is then dropped); values of tolerable odd shapes are skipped.
func (d *Decoder) field(b *Batch, ev *Event, name string) bool {
	r := &d.r
	switch name {
	case "block_hashes":
		n := r.arrayLen()
		start := len(b.hashes)
		for i := 0; i < n && r.err == nil; i++ {
			b.hashes = append(b.hashes, r.hash())
		}
		ev.BlockHashes = b.hashes[start:len(b.hashes):len(b.hashes)]
	case "parent_block_hash":
		if !r.nilNext() {
			ev.ParentHash, ev.HasParent = r.hash(), true
		}
	case "token_ids":
		return d.tokens(b, ev)
	case "block_size":
		if !r.nilNext() {
			ev.BlockSize = r.smallInt()
		}
	case "medium":
		switch r.peek() {
		case tStr:
			ev.Medium = ParseMedium(r.str())
		default:
			r.skip()
		}
	case "lora_name":
		if r.peek() == tStr {
			ev.LoRAName = d.intern(r.str())
		} else {
			r.skip() // nil, or SGLang's metadata map at this position
		}
	case "extra_keys":
		if r.nilNext() {
			return true
		}
		if r.peek() != tArray {
			r.skip()
			return false
		}
		n := r.arrayLen()
		start := len(b.extras)
		for i := 0; i < n && r.err == nil; i++ {
			if r.nilNext() {
				b.extras = append(b.extras, nil)
				continue
			}
			s := r.pos
			r.skip()
			b.extras = append(b.extras, r.buf[s:r.pos:r.pos])
		}
		ev.ExtraKeys = b.extras[start:len(b.extras):len(b.extras)]
	case "group_idx":
		if !r.nilNext() {
			ev.GroupIdx = r.smallInt()
		}
	case "kv_cache_spec_kind":
		switch r.peek() {
		case tNil:
			r.skip()
		case tStr:
			if string(r.str()) == "full_attention" {
				ev.SpecKind = SpecFullAttention
			} else {
				ev.SpecKind = SpecOther
			}
		default:
			r.skip()
			return false
		}
	default:
		r.skip()
	}
	return r.err == nil
}

// tokens decodes token ids of any integer width, and SGLang's bigram form.
func (d *Decoder) tokens(b *Batch, ev *Event) bool {
	r := &d.r
	if r.nilNext() {
		return true
	}
	n := r.arrayLen()
	start := len(b.tokens)
	ok := true
	for i := 0; i < n && r.err == nil; i++ {
		if r.peek() == tArray { // bigram [t_i, t_i+1]: the block's token is the first
			m := r.arrayLen()
			if m == 0 {
				ok = false
				continue
			}
			ok = d.token(b) && ok
			for j := 1; j < m; j++ {
				r.skip()
			}
			continue
		}
		ok = d.token(b) && ok
	}
	ev.TokenIDs = b.tokens[start:len(b.tokens):len(b.tokens)]
	return ok && r.err == nil
}

func (d *Decoder) token(b *Batch) bool {
	if d.r.peek() != tInt {
		d.r.skip()
		return false
	}
	v, neg := d.r.int()
	if neg || v > math.MaxUint32 {
		return false
	}
	b.tokens = append(b.tokens, uint32(v))
	return true
}

func (d *Decoder) intern(name []byte) string {
	if len(name) == 0 {
		return ""
	}
	if s, ok := d.loras[string(name)]; ok {
		return s
	}
	if d.loras == nil || len(d.loras) > 1024 { // bound it: adapter names are few, input is not
		d.loras = make(map[string]string)
	}
	s := string(name)
	d.loras[s] = s
	return s
}

func asciiEqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
