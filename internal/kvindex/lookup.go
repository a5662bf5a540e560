package kvindex

import (
	"math/bits"
	"slices"
	"sync"

	"github.com/kvrouter/kvrouter/internal/kvevents"
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

func (it *keyIter) at(i int) Key {
	if it.keys != nil {
		return it.keys[i]
	}
	var extra uint64
	if i == 0 {
		extra = it.salt
	}
	return it.c.next(it.tokens[i*it.bs:(i+1)*it.bs], extra)
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
	wand  []uint64
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
	// Keys are computed and probed a window at a time: the probes of a window are independent
	// loads the CPU can overlap, where one probe per hash step would serialise on each.
	// The GPU words are copied out in the same pass for the same reason.
	const window = 64
	var (
		wkeys  [window]Key
		wnodes [window]uint32
		wok    [window]bool
		wext   [window]bool
	)
	sc.wbits = slices.Grow(sc.wbits[:0], window*w)[:window*w]
	sc.wand = slices.Grow(sc.wand[:0], w)[:w]
	wbits, wand := sc.wbits, sc.wand
	i := 0
	for ; i < n; i++ {
		live := uint64(0)
		for wi := range alive {
			live |= alive[wi][clsAny] | alive[wi][clsPred]
		}
		if live == 0 {
			break
		}
		j := i % window
		if j == 0 {
			end := min(n-i, window)
			for x := 0; x < end; x++ {
				wkeys[x] = it.at(i + x)
			}
			// wand = sources holding every block of the window on GPU.
			for wi := range wand {
				wand[wi] = ^uint64(0)
			}
			found := true // every block of the window is in the index
			for x := 0; x < end; x++ {
				node, ok := ix.find(uint64(wkeys[x]))
				wnodes[x], wok[x] = node, ok
				if !ok {
					found = false
					continue
				}
				bits := wbits[x*w : (x+1)*w : (x+1)*w]
				copy(bits, ix.gpuWords(node))
				for wi, b := range bits {
					wand[wi] &= b
				}
				wext[x] = ix.exts[node>>chunkShift][node&chunkMask] != 0
				ix.touch(node)
			}
			// Along a shared prefix nobody drops out for many blocks: when every source still
			// in the GPU, any-medium and predicted matches holds the whole window on GPU, and
			// no CPU or storage match is still running, the window changes nothing and is
			// skipped as a whole.
			if found {
				skip := true
				for wi := range alive {
					a := &alive[wi]
					if (a[clsGPU]|a[clsAny]|a[clsPred])&^wand[wi]|a[clsCPU]|a[clsStorage] != 0 {
						skip = false
						break
					}
				}
				if skip {
					i += end - 1
					continue
				}
			}
		}
		k, node, ok := wkeys[j], wnodes[j], wok[j]
		if ok && !wext[j] {
			// The same test for one GPU-only block: nothing changes, nothing to record.
			var drop uint64
			for wi := range alive {
				a := &alive[wi]
				drop |= (a[clsGPU]|a[clsAny]|a[clsPred])&^wbits[j*w+wi] | a[clsCPU] | a[clsStorage]
			}
			if drop == 0 {
				continue
			}
		}
		var gw, cw, sw []uint64
		if ok {
			gw = wbits[j*w : (j+1)*w : (j+1)*w]
			if wext[j] {
				cw = ix.mediumWords(node, kvevents.MediumCPU)
				sw = ix.mediumWords(node, kvevents.MediumStorage)
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
			// Fast path: nobody drops out at this block (the common case along a shared prefix).
			var drop uint64
			for cl := range held {
				drop |= a[cl] &^ held[cl]
			}
			if drop == 0 {
				continue
			}
			for cl := range held {
				narrow(&a[cl], held[cl], lens[cl], wi, i)
			}
		}
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
