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

package kvindex

import (
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
)

// predictions are the router's guesses of what a source will hold: after routing a request the
// router predicts its blocks for the chosen source until events confirm them or the TTL passes.
//
// They live apart from the confirmed store, in a flat open-addressing multimap (linear probing
// on the content key, one 24-byte slot per (key, source) prediction, several slots per key when
// several sources are predicted to hold it). A Go map of per-key slices cost an insert, a slice
// allocation and later a sweep per block: ~3.5 ms per 100K-token request, the largest single
// cost of the request path at 100 requests/s. Here a prediction is one probe and one store.
//
// Only blocks the source does not already hold on GPU are predicted (see PredictKeys), and the
// engine's events remove predictions as they confirm them, so the table holds the in-flight
// uncached suffixes of recent requests: small, and cheap to sweep.
//
// Every mutation happens under the index's write lock and every read under its read lock, so
// the table needs no lock of its own.
type predictions struct {
	slots     []predSlot // len is 0 or a power of two
	n         int        // occupied slots
	nextSweep int64
}

type predSlot struct {
	key     Key // 0 = empty (content keys are never 0)
	expires int64
	sid     uint16
}

const minPredSlots = 1024

func (p *predictions) count() int { return p.n }

func (p *predictions) home(k Key) uint64 { return uint64(k) & uint64(len(p.slots)-1) }

// add records that sid will hold each of keys until now+ttl (a prediction already there keeps
// the later expiry). At most limit predictions are held (expired ones are swept first, and at least
// every sweepEvery); keys beyond that are not predicted.
func (p *predictions) add(sid uint16, keys []Key, now, ttl, sweepEvery int64, limit int) {
	if now >= p.nextSweep || p.n+len(keys) > limit {
		p.sweep(now)
		p.nextSweep = now + sweepEvery
	}
	p.reserve(min(p.n+len(keys), limit))
	exp := now + ttl
	mask := uint64(len(p.slots) - 1)
	for _, k := range keys {
		i := p.home(k)
		for {
			s := &p.slots[i]
			if s.key == 0 {
				if p.n >= limit {
					return
				}
				*s = predSlot{key: k, expires: exp, sid: sid}
				p.n++
				break
			}
			if s.key == k && s.sid == sid {
				s.expires = max(s.expires, exp)
				break
			}
			i = (i + 1) & mask
		}
	}
}

// reserve grows the table so that n predictions keep it at most half full (short probe runs
// even when many sources are predicted to hold the same hot key).
func (p *predictions) reserve(n int) {
	size := len(p.slots)
	if size == 0 {
		size = minPredSlots
	}
	for 2*n > size {
		size *= 2
	}
	if size != len(p.slots) {
		p.rehash(size, func(predSlot) bool { return true })
	}
}

// rehash moves the slots that keep into a fresh table of size slots.
func (p *predictions) rehash(size int, keep func(predSlot) bool) {
	old := p.slots
	p.slots = make([]predSlot, size)
	p.n = 0
	mask := uint64(size - 1)
	for _, s := range old {
		if s.key == 0 || !keep(s) {
			continue
		}
		i := p.home(s.key)
		for p.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		p.slots[i] = s
		p.n++
	}
}

// sweep drops expired predictions and shrinks a table a past burst left mostly empty.
func (p *predictions) sweep(now int64) {
	if p.n == 0 {
		if len(p.slots) > minPredSlots {
			p.slots = nil
		}
		return
	}
	live := 0
	for _, s := range p.slots {
		if s.key != 0 && s.expires > now {
			live++
		}
	}
	if live == p.n {
		return
	}
	size := len(p.slots)
	for size > minPredSlots && 8*live < size {
		size /= 2
	}
	p.rehash(size, func(s predSlot) bool { return s.expires > now })
}

// settle brings the expiry of sid's predictions of keys forward to at most until.
func (p *predictions) settle(sid uint16, keys []Key, until int64) {
	if p.n == 0 {
		return
	}
	mask := uint64(len(p.slots) - 1)
	for _, k := range keys {
		for i := p.home(k); ; i = (i + 1) & mask {
			s := &p.slots[i]
			if s.key == 0 {
				break
			}
			if s.key == k && s.sid == sid {
				s.expires = min(s.expires, until)
				break
			}
		}
	}
}

// remove drops the prediction (sid, k), if any, by backward-shift deletion (no tombstones, so
// probe runs stay short).
func (p *predictions) remove(sid uint16, k Key) {
	if p.n == 0 {
		return
	}
	mask := uint64(len(p.slots) - 1)
	i := p.home(k)
	for {
		s := p.slots[i]
		if s.key == 0 {
			return
		}
		if s.key == k && s.sid == sid {
			break
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; p.slots[j].key != 0; j = (j + 1) & mask {
		if h := p.home(p.slots[j].key); (j-h)&mask >= (j-i)&mask {
			p.slots[i] = p.slots[j]
			i = j
		}
	}
	p.slots[i] = predSlot{}
	p.n--
}

func (p *predictions) dropSource(sid uint16) {
	if p.n == 0 {
		return
	}
	p.rehash(len(p.slots), func(s predSlot) bool { return s.sid != sid })
}

// bits ORs into ws the sources with an unexpired prediction of k.
func (p *predictions) bits(k Key, now int64, ws []uint64) {
	if p.n == 0 {
		return
	}
	mask := uint64(len(p.slots) - 1)
	for i := p.home(k); ; i = (i + 1) & mask {
		s := &p.slots[i]
		if s.key == 0 {
			return
		}
		if s.key == k && s.expires > now && int(s.sid>>6) < len(ws) {
			ws[s.sid>>6] |= 1 << (s.sid & 63)
		}
	}
}

// confirm drops the prediction that a GPU store just made true, so that the engine's later
// removal is not masked by a stale prediction.
func (ix *Index) confirm(sid uint16, k Key, m kvevents.Medium) {
	if m != kvevents.MediumGPU || ix.pred.n == 0 {
		return
	}
	ix.pred.remove(sid, k)
}

// Predict records that src will soon hold the request's full blocks on GPU (the router just sent
// the request there): until events confirm them or Config.PredictTTL passes, Lookup reports them
// in PredictedBlocks. This covers event lag and bursts of sibling requests.
//
// It hashes the tokens; a caller that already has the request's keys (it looked them up with
// LookupKeys) should call PredictKeys instead.
func (ix *Index) Predict(src SourceID, tokens []uint32, p KeyParams) {
	ix.PredictKeys(src, RequestKeys(nil, tokens, ix.blockSize, p))
}

// PredictKeys is Predict over precomputed content keys (see RequestKeys).
//
// Blocks src already holds on GPU are not predicted: a prediction of a confirmed block would
// only mask the engine's later removal of it, which is exactly what confirmation by an event
// prevents (see confirm); so the outcome is the same as predicting every block, for the cost of
// the uncached suffix. A confirmed block removed within the TTL is reported as gone.
func (ix *Index) PredictKeys(src SourceID, keys []Key) {
	ix.predictKeys(src, keys, ix.cfg.PredictTTL)
}

// PredictPendingKeys is PredictKeys for a request that has been sent to src and not yet
// started there: its predictions last until SettleKeys (or events confirm them, or
// Config.PredictHold passes), however long the request waits in the engine's queue. A fixed
// lifetime shorter than that wait is what made a busy fleet place one prefix twice: the
// prediction expired while the first request was still queued, the next request of the same
// prefix saw no holder and started a second copy elsewhere (docs/benchmarks.md).
func (ix *Index) PredictPendingKeys(src SourceID, keys []Key) {
	ix.predictKeys(src, keys, ix.cfg.PredictHold)
}

// SettleKeys says that the request whose keys were predicted with PredictPendingKeys has
// started on src (its first token came back) or ended: what events have not confirmed by then
// expires within Config.PredictTTL, like any other prediction. Keys never predicted are ignored.
func (ix *Index) SettleKeys(src SourceID, keys []Key) {
	if len(keys) == 0 {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	sid, ok := ix.srcIDs[src]
	if !ok || ix.pred.n == 0 {
		return
	}
	ix.pred.settle(sid, keys, ix.cfg.Now().UnixNano()+int64(ix.cfg.PredictTTL))
}

func (ix *Index) predictKeys(src SourceID, keys []Key, ttl time.Duration) {
	if len(keys) == 0 {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s := ix.sourceFor(src)
	if s == nil {
		return
	}
	todo := ix.predScratch[:0]
	for _, k := range keys {
		if n, ok := ix.find(uint64(k)); ok && ix.holds(n, kvevents.MediumGPU, s.sid) {
			continue
		}
		todo = append(todo, k)
	}
	if cap(todo) <= 1<<16 {
		ix.predScratch = todo[:0]
	}
	if len(todo) == 0 {
		return
	}
	now := ix.cfg.Now().UnixNano()
	ix.pred.add(s.sid, todo, now, int64(ttl), int64(ix.cfg.PredictTTL), ix.cfg.MaxKeys)
}
