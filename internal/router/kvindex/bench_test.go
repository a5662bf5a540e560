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

package kvindex_test

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvevents/kveventstest"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/test/cputime"
)

// BenchmarkDecodeApply measures the ingestion hot path, msgpack decode + index apply, in an
// engine's steady state: each batch (map encoding, vLLM >= 0.24) stores 16 new 16-token blocks
// chained to the previous batch's and removes the 16 blocks stored 64 batches earlier.
// blocks/s counts stored + removed blocks. Run on one core: -cpu 1.
func BenchmarkDecodeApply(b *testing.B) {
	const (
		blockSize = 16
		perBatch  = 16
		nBatches  = 1024
		lag       = 64
	)
	payloads := make([][]byte, nBatches)
	hash := func(batch, i int) uint64 { return uint64(batch*perBatch+i)*0x9e3779b97f4a7c15 | 1 }
	for i := range payloads {
		st := kveventstest.Stored{BlockSize: blockSize, Medium: "GPU", ExtraKeys: make([][]string, perBatch)}
		if i > 0 {
			p := hash(i-1, perBatch-1)
			st.Parent = &p
		}
		for j := 0; j < perBatch; j++ {
			st.Hashes = append(st.Hashes, hash(i, j))
			for t := 0; t < blockSize; t++ {
				st.Tokens = append(st.Tokens, uint32(100000+i*977+j*31+t))
			}
		}
		old := (i - lag + nBatches) % nBatches
		rm := kveventstest.Removed{Medium: "GPU"}
		for j := 0; j < perBatch; j++ {
			rm.Hashes = append(rm.Hashes, hash(old, j))
		}
		payloads[i] = kveventstest.Batch(float64(i), 0, true, st, rm)
	}
	ix := kvindex.New(kvindex.Config{BlockSize: blockSize})
	src := kvindex.SourceID{Endpoint: "e"}
	var d kvevents.Decoder
	var batch kvevents.Batch
	run := func(p []byte) kvindex.ApplyStats {
		if err := d.Decode(p, &batch); err != nil {
			b.Fatal(err)
		}
		return ix.Apply(src, &batch)
	}
	for _, p := range payloads { // warm up: the first pass removes blocks not stored yet
		run(p)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	blocks := 0
	for i := 0; i < b.N; i++ {
		st := run(payloads[i%nBatches])
		blocks += st.BlocksStored + st.BlocksRemoved
	}
	b.StopTimer()
	cpu := cputime.Process() - cpu0
	if want := b.N * 2 * perBatch; blocks != want {
		b.Fatalf("applied %d blocks, want %d", blocks, want)
	}
	b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
	b.ReportMetric(float64(blocks)/cpu.Seconds(), "cpu-blocks/s")
}

// populate makes each of nEnd endpoints hold blocks of the prompt: holds(e) leading blocks.
func populate(b *testing.B, ix *kvindex.Index, prompt []uint32, blockSize, nEnd int, holds func(e int) int) {
	for e := 0; e < nEnd; e++ {
		n := holds(e)
		ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockSize: blockSize, TokenIDs: prompt[:n*blockSize]}
		for j := 0; j < n; j++ {
			ev.BlockHashes = append(ev.BlockHashes, uint64(e)<<32|uint64(j)+1)
		}
		ix.Apply(kvindex.SourceID{Endpoint: fmt.Sprint("endpoint-", e)}, &kvevents.Batch{Events: []kvevents.Event{ev}})
	}
}

// BenchmarkLookup100K looks up a 100K-token prompt (6,250 blocks of 16) against 100 endpoints,
// keys computed from the tokens inside the lookup. "all-hold-all" is the worst case (every
// endpoint holds the whole prompt, so no endpoint drops out early); "staggered" has endpoint i
// hold the first 62*(i+1) blocks. Reports p50 and p99 of per-call latency.
func BenchmarkLookup100K(b *testing.B) {
	const blockSize, nEnd, nBlocks = 16, 100, 6250
	prompt := make([]uint32, nBlocks*blockSize)
	for i := range prompt {
		prompt[i] = uint32(i*7919) % 151000
	}
	for _, sc := range []struct {
		name  string
		holds func(int) int
	}{
		{"all-hold-all", func(int) int { return nBlocks }},
		{"staggered", func(e int) int { return 62 * (e + 1) }},
	} {
		ix := kvindex.New(kvindex.Config{BlockSize: blockSize})
		populate(b, ix, prompt, blockSize, nEnd, sc.holds)
		if ms := ix.Lookup(prompt, kvindex.LookupOptions{}); len(ms) != nEnd || ms[nEnd-1].AnyBlocks != sc.holds(nEnd-1) {
			b.Fatalf("lookup wrong: %d matches", len(ms))
		}
		// "Lookup" allocates its result; "AppendLookup" reuses the caller's slice.
		for _, reuse := range []bool{false, true} {
			name := sc.name + "/Lookup"
			if reuse {
				name = sc.name + "/AppendLookup"
			}
			b.Run(name, func(b *testing.B) {
				durs := make([]time.Duration, 0, b.N)
				var dst []kvindex.EndpointMatch
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cputime.Process()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					if reuse {
						dst = ix.AppendLookup(dst[:0], prompt, kvindex.LookupOptions{})
					} else {
						ix.Lookup(prompt, kvindex.LookupOptions{})
					}
					durs = append(durs, time.Since(t0))
				}
				b.StopTimer()
				b.ReportMetric(float64((cputime.Process()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
				slices.Sort(durs)
				b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds())/1000, "p99-ms")
			})
		}
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMemoryPerEntry measures heap bytes per (block, endpoint) entry at 2.5M entries:
// 100 endpoints × 25,000 blocks of 16 tokens, fed as events. "disjoint": every endpoint holds
// different content (worst case, one key per entry); "shared": all hold the same 25,000 blocks;
// "half-shared": a common 12,500-block prefix plus 12,500 blocks of their own.
// Run with -benchtime=1x.
func BenchmarkMemoryPerEntry(b *testing.B) {
	const blockSize, nEnd, nBlocks = 16, 100, 25000
	for _, sc := range []struct {
		name   string
		shared int // leading blocks common to all endpoints
	}{{"disjoint", 0}, {"half-shared", nBlocks / 2}, {"shared", nBlocks}} {
		b.Run(sc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				before := heapInUse()
				ix := kvindex.New(kvindex.Config{BlockSize: blockSize})
				tokens := make([]uint32, nBlocks*blockSize)
				for e := 0; e < nEnd; e++ {
					for t := range tokens {
						if t < sc.shared*blockSize {
							tokens[t] = uint32(t)
						} else {
							tokens[t] = uint32(e*1000003 + t)
						}
					}
					// Engines send a request's blocks in events of a few dozen blocks.
					src := kvindex.SourceID{Endpoint: fmt.Sprint("endpoint-", e)}
					for j := 0; j < nBlocks; j += 64 {
						n := min(64, nBlocks-j)
						ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockSize: blockSize,
							TokenIDs: tokens[j*blockSize : (j+n)*blockSize]}
						if j > 0 {
							ev.HasParent, ev.ParentHash = true, uint64(e)<<32|uint64(j)
						}
						for k := 0; k < n; k++ {
							ev.BlockHashes = append(ev.BlockHashes, uint64(e)<<32|uint64(j+k+1))
						}
						ix.Apply(src, &kvevents.Batch{Events: []kvevents.Event{ev}})
					}
				}
				st := ix.Stats()
				if st.Entries != nEnd*nBlocks {
					b.Fatalf("%d entries", st.Entries)
				}
				after := heapInUse()
				runtime.KeepAlive(ix)
				b.ReportMetric(float64(after-before)/float64(st.Entries), "B/entry")
				b.ReportMetric(float64(st.Keys), "keys")
				b.ReportMetric(float64(after-before)/(1<<20), "heap-MiB")
			}
		})
	}
}

// BenchmarkRequestKeys100K is the router's cost of keying a 100K-token prompt (6,250 blocks).
func BenchmarkRequestKeys100K(b *testing.B) {
	prompt := make([]uint32, 100000)
	for i := range prompt {
		prompt[i] = uint32(i * 7919 % 151000)
	}
	dst := make([]kvindex.Key, 0, 6250)
	for i := 0; i < b.N; i++ {
		dst = kvindex.RequestKeys(dst[:0], prompt, 16, kvindex.KeyParams{})
	}
}

// BenchmarkPredict100K is the router's Predict after routing a 100K-token prompt (6,250 blocks)
// at the sizing point: 100 endpoints, a new request every 10 ms of the index's clock (100
// requests/s) with the default 2 s TTL, keys precomputed (PredictKeys; the router computes them
// once for the lookup). "warm": the prompts are 20 shared 5,625-block prefixes plus a distinct
// 625-block suffix, and each request goes to an endpoint that holds its prefix, so only the
// suffix is new; "cold": nobody holds anything, every block is predicted. No events confirm the
// predictions, so they accumulate for the whole TTL (the worst case for the table's size).
func BenchmarkPredict100K(b *testing.B) {
	const blockSize, nEnd, nBlocks, shared, nPrefixes, nPrompts = 16, 100, 6250, 5625, 20, 256
	prefixes := make([][]uint32, nPrefixes)
	for p := range prefixes {
		prefixes[p] = make([]uint32, shared*blockSize)
		for i := range prefixes[p] {
			prefixes[p][i] = uint32(p*1_000_003+i*7919) % 151000
		}
	}
	keys := make([][]kvindex.Key, nPrompts)
	for r := range keys {
		prompt := append([]uint32(nil), prefixes[r%nPrefixes]...)
		for i := shared * blockSize; i < nBlocks*blockSize; i++ {
			prompt = append(prompt, uint32(r*7_000_003+i*104729)%151000)
		}
		keys[r] = kvindex.RequestKeys(nil, prompt, blockSize, kvindex.KeyParams{})
	}
	src := func(e int) kvindex.SourceID { return kvindex.SourceID{Endpoint: fmt.Sprintf("e%03d", e)} }
	for _, warm := range []bool{true, false} {
		name := "cold"
		if warm {
			name = "warm"
		}
		b.Run(name, func(b *testing.B) {
			now := time.Unix(1_000_000, 0)
			ix := kvindex.New(kvindex.Config{BlockSize: blockSize, Now: func() time.Time { return now }})
			if warm {
				for e := 0; e < nEnd; e++ {
					ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockSize: blockSize, TokenIDs: prefixes[e%nPrefixes]}
					for j := 0; j < shared; j++ {
						ev.BlockHashes = append(ev.BlockHashes, uint64(e)<<32|uint64(j)+1)
					}
					ix.Apply(src(e), &kvevents.Batch{Events: []kvevents.Event{ev}})
				}
			}
			srcs := make([]kvindex.SourceID, nEnd)
			for e := range srcs {
				srcs[e] = src(e)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := i % nPrompts
				// An endpoint holding the request's prefix: e ≡ r (mod 20).
				e := r%nPrefixes + nPrefixes*((i/nPrompts)%(nEnd/nPrefixes))
				ix.PredictKeys(srcs[e], keys[r])
				now = now.Add(10 * time.Millisecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(ix.Stats().Predicted), "predicted-entries")
		})
	}
}

// fill feeds nEnd endpoints perEnd blocks each, in events of 64 blocks, and returns the
// sources. shared: all endpoints hold the same content (under their own engine hashes);
// otherwise every endpoint's content is its own. Engine hash of endpoint e's block j:
// e<<32 | j+1.
func fill(b *testing.B, ix *kvindex.Index, nEnd, perEnd, blockSize int, shared bool) []kvindex.SourceID {
	tokens := make([]uint32, perEnd*blockSize)
	srcs := make([]kvindex.SourceID, nEnd)
	hashes := make([]uint64, 0, 64)
	for e := 0; e < nEnd; e++ {
		for t := range tokens {
			if shared {
				tokens[t] = uint32(t)
			} else {
				tokens[t] = uint32(e*1000003 + t)
			}
		}
		srcs[e] = kvindex.SourceID{Endpoint: fmt.Sprint("endpoint-", e)}
		for j := 0; j < perEnd; j += 64 {
			n := min(64, perEnd-j)
			ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockSize: blockSize,
				TokenIDs: tokens[j*blockSize : (j+n)*blockSize]}
			if j > 0 {
				ev.HasParent, ev.ParentHash = true, uint64(e)<<32|uint64(j)
			}
			hashes = hashes[:0]
			for k := 0; k < n; k++ {
				hashes = append(hashes, uint64(e)<<32|uint64(j+k+1))
			}
			ev.BlockHashes = hashes
			ix.Apply(srcs[e], &kvevents.Batch{Events: []kvevents.Event{ev}})
		}
	}
	return srcs
}

// BenchmarkMemoryScale measures heap bytes per (block, endpoint) entry at 100K, 1M and 10M
// entries over 100 endpoints, "disjoint" (one key per entry) and "shared" (every endpoint
// holds the same blocks). Run with -benchtime=1x; 10M takes about 1 GiB.
func BenchmarkMemoryScale(b *testing.B) {
	const blockSize, nEnd = 16, 100
	for _, entries := range []int{100_000, 1_000_000, 10_000_000} {
		for _, shared := range []bool{false, true} {
			name := fmt.Sprintf("%dK/disjoint", entries/1000)
			if shared {
				name = fmt.Sprintf("%dK/shared", entries/1000)
			}
			b.Run(name, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					before := heapInUse()
					ix := kvindex.New(kvindex.Config{BlockSize: blockSize, MaxKeys: 2 * entries})
					fill(b, ix, nEnd, entries/nEnd, blockSize, shared)
					st := ix.Stats()
					if st.Entries != entries {
						b.Fatalf("%d entries", st.Entries)
					}
					after := heapInUse()
					runtime.KeepAlive(ix)
					b.ReportMetric(float64(after-before)/float64(st.Entries), "B/entry")
					b.ReportMetric(float64(after-before)/(1<<20), "heap-MiB")
				}
			})
		}
	}
}

// BenchmarkShrink fills 1M disjoint entries (100 endpoints × 10,000 blocks), then removes 95%
// of every endpoint's blocks, in events of 64 blocks, and reports the heap at the peak and
// after the removals, and the longest Apply of the removals (a compaction runs inside one).
// Run with -benchtime=1x.
func BenchmarkShrink(b *testing.B) {
	const blockSize, nEnd, perEnd = 16, 100, 10_000
	for i := 0; i < b.N; i++ {
		before := heapInUse()
		ix := kvindex.New(kvindex.Config{BlockSize: blockSize})
		srcs := fill(b, ix, nEnd, perEnd, blockSize, false)
		peak := heapInUse()
		var longest time.Duration
		for j := 0; j < perEnd*95/100; j += 64 {
			for e, src := range srcs {
				ev := kvevents.Event{Kind: kvevents.KindBlockRemoved}
				for k := j; k < min(j+64, perEnd*95/100); k++ {
					ev.BlockHashes = append(ev.BlockHashes, uint64(e)<<32|uint64(k+1))
				}
				t0 := time.Now()
				ix.Apply(src, &kvevents.Batch{Events: []kvevents.Event{ev}})
				longest = max(longest, time.Since(t0))
			}
		}
		if st := ix.Stats(); st.Entries != nEnd*perEnd/20 {
			b.Fatalf("%d entries left", st.Entries)
		}
		after := heapInUse()
		runtime.KeepAlive(ix)
		b.ReportMetric(float64(peak-before)/(1<<20), "peak-MiB")
		b.ReportMetric(float64(after-before)/(1<<20), "after-MiB")
		b.ReportMetric(float64(longest.Microseconds())/1000, "max-apply-ms")
	}
}

// BenchmarkApply100 measures Apply alone (events already decoded) at 100 endpoints in steady
// state: each endpoint's batch stores 16 new 16-token blocks chained to its previous batch and
// removes the 16 stored 256 batches earlier, so the index holds ~410K entries; endpoints take
// turns. blocks/s counts stored + removed blocks. Run on one core: -cpu 1.
func BenchmarkApply100(b *testing.B) {
	const (
		blockSize = 16
		perBatch  = 16
		nBatches  = 1024
		lag       = 256
		nEnd      = 100
	)
	// One token array; endpoint e reads it shifted by e tokens, so contents differ.
	tokens := make([]uint32, nBatches*perBatch*blockSize+nEnd)
	for i := range tokens {
		tokens[i] = uint32(i*7919) % 151000
	}
	hash := func(e, batch, i int) uint64 { return uint64(e)<<40 | uint64(batch*perBatch+i+1) }
	batches := make([][]kvevents.Batch, nEnd)
	srcs := make([]kvindex.SourceID, nEnd)
	for e := range batches {
		srcs[e] = kvindex.SourceID{Endpoint: fmt.Sprint("endpoint-", e)}
		batches[e] = make([]kvevents.Batch, nBatches)
		for i := range batches[e] {
			st := kvevents.Event{Kind: kvevents.KindBlockStored, BlockSize: blockSize,
				TokenIDs: tokens[e+i*perBatch*blockSize : e+(i+1)*perBatch*blockSize]}
			if i > 0 {
				st.HasParent, st.ParentHash = true, hash(e, i-1, perBatch-1)
			}
			rm := kvevents.Event{Kind: kvevents.KindBlockRemoved}
			old := (i - lag + nBatches) % nBatches
			for j := 0; j < perBatch; j++ {
				st.BlockHashes = append(st.BlockHashes, hash(e, i, j))
				rm.BlockHashes = append(rm.BlockHashes, hash(e, old, j))
			}
			batches[e][i] = kvevents.Batch{Events: []kvevents.Event{st, rm}}
		}
	}
	ix := kvindex.New(kvindex.Config{BlockSize: blockSize})
	for i := 0; i < nBatches; i++ { // warm up: the first pass removes blocks not stored yet
		for e := range srcs {
			ix.Apply(srcs[e], &batches[e][i])
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	blocks := 0
	for i := 0; i < b.N; i++ {
		e := i % nEnd
		st := ix.Apply(srcs[e], &batches[e][(i/nEnd)%nBatches])
		blocks += st.BlocksStored + st.BlocksRemoved
	}
	b.StopTimer()
	cpu := cputime.Process() - cpu0
	if want := b.N * 2 * perBatch; blocks != want {
		b.Fatalf("applied %d blocks, want %d", blocks, want)
	}
	b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
	b.ReportMetric(float64(blocks)/cpu.Seconds(), "cpu-blocks/s")
	b.ReportMetric(float64(ix.Stats().Entries), "entries")
}
