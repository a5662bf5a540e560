package kvindex

import (
	"sync"

	"github.com/kvrouter/kvrouter/internal/kvevents"
)

// predictions are the router's guesses of what a source will hold: after routing a request the
// router predicts its blocks for the chosen source until events confirm them or the TTL passes.
// They live apart from the confirmed store (their own lock, a plain map) because they are few
// (recent requests × TTL) and short-lived.
type predictions struct {
	mu        sync.RWMutex
	m         map[Key][]predEntry
	n         int
	nextSweep int64
}

type predEntry struct {
	sid     uint16
	expires int64 // unix nanoseconds
}

func (p *predictions) count() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.n
}

// add records keys for sid; the caller holds ix.mu (write) so sid is stable.
func (p *predictions) add(sid uint16, keys []Key, now, ttl int64, max int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now >= p.nextSweep || p.n+len(keys) > max {
		p.sweep(now)
		p.nextSweep = now + ttl
	}
	exp := now + ttl
	for _, k := range keys {
		if p.n >= max {
			return
		}
		es := p.m[k]
		found := false
		for i := range es {
			if es[i].sid == sid {
				es[i].expires = exp
				found = true
				break
			}
		}
		if !found {
			p.m[k] = append(es, predEntry{sid: sid, expires: exp})
			p.n++
		}
	}
}

func (p *predictions) sweep(now int64) {
	for k, es := range p.m {
		kept := es[:0]
		for _, e := range es {
			if e.expires > now {
				kept = append(kept, e)
			}
		}
		p.n -= len(es) - len(kept)
		if len(kept) == 0 {
			delete(p.m, k)
		} else {
			p.m[k] = kept
		}
	}
}

// remove drops the prediction (sid, k), if any.
func (p *predictions) remove(sid uint16, k Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	es, ok := p.m[k]
	if !ok {
		return
	}
	for i := range es {
		if es[i].sid == sid {
			es[i] = es[len(es)-1]
			es = es[:len(es)-1]
			p.n--
			break
		}
	}
	if len(es) == 0 {
		delete(p.m, k)
	} else {
		p.m[k] = es
	}
}

func (p *predictions) dropSource(sid uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, es := range p.m {
		kept := es[:0]
		for _, e := range es {
			if e.sid != sid {
				kept = append(kept, e)
			}
		}
		p.n -= len(es) - len(kept)
		if len(kept) == 0 {
			delete(p.m, k)
		} else {
			p.m[k] = kept
		}
	}
}

// bits ORs into ws the sources with an unexpired prediction of k. The caller holds p.mu (read).
func (p *predictions) bits(k Key, now int64, ws []uint64) {
	for _, e := range p.m[k] {
		if e.expires > now && int(e.sid>>6) < len(ws) {
			ws[e.sid>>6] |= 1 << (e.sid & 63)
		}
	}
}

// confirm drops the prediction that a GPU store just made true, so that the engine's later
// removal is not masked by a stale prediction.
func (ix *Index) confirm(sid uint16, k Key, m kvevents.Medium) {
	if m != kvevents.MediumGPU {
		return
	}
	// Racy read is fine: predictions are only added under ix.mu, which the caller holds.
	if ix.pred.n == 0 {
		return
	}
	ix.pred.remove(sid, k)
}

// Predict records that src will soon hold the request's full blocks on GPU (the router just sent
// the request there): until events confirm them or Config.PredictTTL passes, Lookup reports them
// in PredictedBlocks. This covers event lag and bursts of sibling requests.
func (ix *Index) Predict(src SourceID, tokens []uint32, p KeyParams) {
	ix.PredictKeys(src, RequestKeys(nil, tokens, ix.blockSize, p))
}

// PredictKeys is Predict over precomputed content keys.
func (ix *Index) PredictKeys(src SourceID, keys []Key) {
	if len(keys) == 0 {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s := ix.sourceFor(src)
	if s == nil {
		return
	}
	now := ix.cfg.Now().UnixNano()
	ix.pred.add(s.sid, keys, now, int64(ix.cfg.PredictTTL), ix.cfg.MaxKeys)
}
