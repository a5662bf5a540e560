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
	"math/bits"
	"slices"
	"sync"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
)

// keyIter yields a request's content keys, computing them lazily: a lookup stops at the first
// block no source holds, so a cold prompt costs one window of hashes, not one per block.
type keyIter struct {
	keys   []Key
	tokens []uint32
	bs     int
	salt   uint64
	c      chain
}

func (it *keyIter) len() int {
	if it.keys != nil {
		return len(it.keys)
	}
	return len(it.tokens) / it.bs
}

// fill computes the keys of blocks i, i+1, ... into dst, the chain kept in a local so the
// hash of one block does not wait on a store and reload of the previous key.
func (it *keyIter) fill(dst []Key, i int) {
	if it.keys != nil {
		copy(dst, it.keys[i:])
		return
	}
	c, bs, toks := it.c, it.bs, it.tokens
	for x := range dst {
		var extra uint64
		if i+x == 0 {
			extra = it.salt
		}
		off := (i + x) * bs
		dst[x] = c.next(toks[off:off+bs:off+bs], extra)
	}
	it.c = c
}

// Lookup returns, for each source holding at least the first block of the request (confirmed or
// predicted), the longest contiguous cached prefix per medium. Sources absent from the result
// hold nothing of it. The order is by source id (stable while sources stay).
func (ix *Index) Lookup(tokens []uint32, opts LookupOptions) []EndpointMatch {
	it := keyIter{tokens: tokens, bs: ix.blockSize, c: ix.root(opts.LoRAName)}
	if opts.CacheSalt != "" {
		it.salt = saltDigest(opts.CacheSalt)
	}
	return ix.lookup(nil, &it, opts.MaxBlocks)
}

// AppendLookup is Lookup appending to dst: a caller that reuses dst makes lookups allocation
// free, which keeps garbage collection away from the routing path.
func (ix *Index) AppendLookup(dst []EndpointMatch, tokens []uint32, opts LookupOptions) []EndpointMatch {
	it := keyIter{tokens: tokens, bs: ix.blockSize, c: ix.root(opts.LoRAName)}
	if opts.CacheSalt != "" {
		it.salt = saltDigest(opts.CacheSalt)
	}
	return ix.lookup(dst, &it, opts.MaxBlocks)
}

// LookupKeys is Lookup over precomputed content keys (see RequestKeys).
func (ix *Index) LookupKeys(keys []Key) []EndpointMatch {
	if keys == nil {
		keys = []Key{}
	}
	return ix.lookup(nil, &keyIter{keys: keys}, 0)
}

// AppendLookupKeys is LookupKeys appending to dst (allocation free when dst has room): the
// routing path computes a request's keys once, looks them up with this and predicts them with
// PredictKeys.
func (ix *Index) AppendLookupKeys(dst []EndpointMatch, keys []Key) []EndpointMatch {
	if keys == nil {
		keys = []Key{}
	}
	return ix.lookup(dst, &keyIter{keys: keys}, 0)
}

// Match classes tracked per source during a lookup.
const (
	clsGPU = iota
	clsCPU
	clsStorage
	clsAny
	clsPred
	numCls
)

// lookupScratch is a lookup's working memory, pooled so lookups allocate only their result.
type lookupScratch struct {
	alive [][numCls]uint64
	pbits []uint64
	lens  []int32
	wbits []uint64
	rel   []uint64
	cw    []uint64
	sw    []uint64
}

var scratchPool = sync.Pool{New: func() any { return new(lookupScratch) }}

func (ix *Index) lookup(out []EndpointMatch, it *keyIter, maxBlocks int) []EndpointMatch {
	n := it.len()
	if maxBlocks > 0 && maxBlocks < n {
		n = maxBlocks
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	nsrc := len(ix.srcs)
	if n == 0 || nsrc == 0 {
		return out
	}
	w := ix.w
	// alive[word][c] = sources whose class-c prefix still extends (word-major, so the inner
	// loop indexes a fixed-size array); lens[c][sid] = final lengths.
	sc := scratchPool.Get().(*lookupScratch)
	defer scratchPool.Put(sc)
	sc.alive = slices.Grow(sc.alive[:0], w)[:w]
	sc.pbits = slices.Grow(sc.pbits[:0], w)[:w]
	sc.lens = slices.Grow(sc.lens[:0], numCls*nsrc)[:numCls*nsrc]
	alive, pbits, lensBuf := sc.alive, sc.pbits, sc.lens
	clear(alive)
	clear(lensBuf)
	for sid, s := range ix.srcs {
		if s != nil {
			for c := 0; c < numCls; c++ {
				alive[sid>>6][c] |= 1 << (sid & 63)
			}
		}
	}
	var lens [numCls][]int32
	for c := range lens {
		lens[c] = lensBuf[c*nsrc : (c+1)*nsrc]
	}
	usePred := ix.pred.n > 0
	now := ix.cfg.Now().UnixNano()
	// rel = sources still in the GPU, any-medium or predicted prefix (the CPU and storage
	// prefixes are subsets of the any-medium one); csLive: a CPU or storage prefix still runs.
	// Alive sets only shrink, and only at fully processed blocks, so both are recomputed only
	// there. A found block changes nothing, and needs no more than the probe, when no CPU or
	// storage prefix runs and every source in rel holds it on GPU: its CPU and storage bits
	// cannot end a prefix nobody is in, and the predicted prefix needs no prediction lookup.
	sc.rel = slices.Grow(sc.rel[:0], w)[:w]
	rel := sc.rel
	// Keys are computed and probed a window at a time: the probes of a window are independent
	// loads the CPU can overlap, where one probe per hash step would serialise on each.
	// The GPU words are copied out in the same pass for the same reason. A window is 64 blocks
	// so that the blocks needing more than the probe fit in one word: the walk below visits
	// only those instead of testing every block (along a staggered prefix, where somebody drops
	// out in most windows, that test was a fifth of the lookup).
	const window = 64
	var (
		wkeys  [window]Key
		wnodes [window]uint32
		wok    [window]bool
		wext   [window]bool
	)
	sc.wbits = slices.Grow(sc.wbits[:0], window*w)[:window*w]
	sc.cw = slices.Grow(sc.cw[:0], w)[:w]
	sc.sw = slices.Grow(sc.sw[:0], w)[:w]
	wbits := sc.wbits
	i := 0
	live, csLive := refresh(alive, rel)
	for i < n && live {
		end := min(n-i, window)
		it.fill(wkeys[:end], i)
		// quiet: blocks that change nothing given the alive sets at the window's start; the
		// sets only shrink, so they stay quiet for the rest of the window.
		var quiet uint64
		for x := 0; x < end; x++ {
			node, ok := ix.find(uint64(wkeys[x]))
			wnodes[x], wok[x] = node, ok
			if !ok {
				continue
			}
			bits := wbits[x*w : (x+1)*w : (x+1)*w]
			var miss uint64
			// gpuHolders written out: this is the lookup's inner loop, and a call per block
			// showed in the profile.
			if h := ix.hold[node>>chunkShift][node&chunkMask]; h&holdSpill != 0 {
				e := uint32(h)
				off := int(e&chunkMask) * spillStride * w
				src := ix.spill[e>>chunkShift][off : off+w : off+w]
				for wi, b := range src {
					bits[wi] = b
					miss |= rel[wi] &^ b
				}
				wext[x] = h&holdExt != 0
			} else {
				clear(bits)
				ext := false
				for c := 0; c < holdCount(h); c++ {
					sid, mask := holdEnt(h, c)
					bits[sid>>6] |= (mask & 1) << (sid & 63)
					ext = ext || mask&^1 != 0
				}
				wext[x] = ext
				for wi, b := range bits {
					miss |= rel[wi] &^ b
				}
			}
			if miss == 0 && !csLive {
				quiet |= 1 << x
			}
			ix.touch(node)
		}
		for todo := ^quiet & (^uint64(0) >> (window - end)); todo != 0; todo &= todo - 1 {
			j := bits.TrailingZeros64(todo)
			k, node, ok := wkeys[j], wnodes[j], wok[j]
			if ok && !csLive {
				// The same test against the alive sets as they are now.
				var miss uint64
				for wi, b := range wbits[j*w : (j+1)*w : (j+1)*w] {
					miss |= rel[wi] &^ b
				}
				if miss == 0 {
					continue
				}
			}
			var gw, cw, sw []uint64
			if ok {
				gw = wbits[j*w : (j+1)*w : (j+1)*w]
				if wext[j] {
					cw, sw = sc.cw, sc.sw
					ix.holderWords(node, kvevents.MediumCPU, cw)
					ix.holderWords(node, kvevents.MediumStorage, sw)
				}
			}
			// Predictions matter only for sources still in the predicted prefix that lack the
			// block on GPU; look them up only then.
			needPred := false
			if usePred {
				for wi := 0; wi < w; wi++ {
					var g uint64
					if gw != nil {
						g = gw[wi]
					}
					if alive[wi][clsPred]&^g != 0 {
						needPred = true
						break
					}
				}
				if needPred {
					clear(pbits)
					ix.pred.bits(k, now, pbits)
				}
			}
			for wi := range alive {
				a := &alive[wi]
				var g, c, s, p uint64
				if gw != nil {
					g = gw[wi]
				}
				if cw != nil {
					c, s = cw[wi], sw[wi]
				}
				p = g
				if needPred {
					p |= pbits[wi]
				}
				held := [numCls]uint64{g, c, s, g | c | s, p}
				for cl := range held {
					narrow(&a[cl], held[cl], lens[cl], wi, i+j)
				}
			}
			if live, csLive = refresh(alive, rel); !live {
				// Nobody is left: the lengths are all recorded, i no longer matters.
				break
			}
		}
		i += end
	}
	// Whoever is still alive matched all i blocks.
	for wi := range alive {
		for c, x := range alive[wi] {
			for x != 0 {
				b := bits.TrailingZeros64(x)
				x &^= 1 << b
				lens[c][wi*64+b] = int32(i)
			}
		}
	}
	count := 0
	for sid, s := range ix.srcs {
		if s != nil && (lens[clsAny][sid] != 0 || lens[clsPred][sid] != 0) {
			count++
		}
	}
	out = slices.Grow(out, count)
	for sid, s := range ix.srcs {
		if s == nil || (lens[clsAny][sid] == 0 && lens[clsPred][sid] == 0) {
			continue
		}
		out = append(out, EndpointMatch{
			Source: s.id,
			Blocks: [kvevents.NumMedia]int{
				int(lens[clsGPU][sid]), int(lens[clsCPU][sid]), int(lens[clsStorage][sid]),
			},
			AnyBlocks:       int(lens[clsAny][sid]),
			PredictedBlocks: int(lens[clsPred][sid]),
		})
	}
	return out
}

// refresh recomputes rel, the sources still in the any-medium or predicted prefix (the GPU,
// CPU and storage prefixes are subsets of the any-medium one), and reports whether any source
// is left and whether a CPU or storage prefix still runs.
func refresh(alive [][numCls]uint64, rel []uint64) (live, csLive bool) {
	for wi := range alive {
		a := &alive[wi]
		rel[wi] = a[clsAny] | a[clsPred]
		live = live || rel[wi] != 0
		csLive = csLive || a[clsCPU]|a[clsStorage] != 0
	}
	return live, csLive
}

// narrow intersects one word of an alive set with held and records position i as the final
// length of every source that drops out.
func narrow(alive *uint64, held uint64, lens []int32, wi, i int) {
	dropped := *alive &^ held
	if dropped == 0 {
		return
	}
	*alive &= held
	for dropped != 0 {
		b := bits.TrailingZeros64(dropped)
		dropped &^= 1 << b
		lens[wi*64+b] = int32(i)
	}
}
