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

package tokenizer

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
)

// charBytes inverts GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest are
// shifted to U+0100 and up so every byte is a visible character in vocab files.
var charBytes = func() map[rune]byte {
	c2b := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			c2b[rune(b)] = byte(b)
		} else {
			c2b[rune(256+n)] = byte(b)
			n++
		}
	}
	return c2b
}()

func charToByte(r rune) (byte, bool) {
	b, ok := charBytes[r]
	return b, ok
}

type modelJSON struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  json.RawMessage   `json:"merges"`
}

// bpe is a byte-level BPE model keyed by raw bytes: the vocabulary's byte-level strings are
// decoded once at load, so encoding never builds the byte-level form of a word.
type bpe struct {
	tokens       map[string]uint32 // byte-level token string -> id, as in the file
	vocab        map[string]uint32 // raw bytes -> id
	byteID       [256]uint32
	byteOK       [256]bool
	merges       map[uint64]uint64 // left<<32|right -> rank<<32|merged id
	ignoreMerges bool
	// whole answers most words with one lock-free lookup: with ignore_merges every vocabulary
	// entry, otherwise the entries that BPE turns into themselves (a memo of those words' merges).
	whole *wordTable
	cache wordCache
}

func loadBPE(m *modelJSON) (*bpe, error) {
	switch m.Type {
	case "BPE":
	case "":
		if m.Merges == nil {
			return nil, unsupported("model without a type or merges")
		}
	default:
		return nil, unsupported("model %q", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, unsupported("BPE dropout")
	}
	if m.ByteFallback {
		return nil, unsupported("BPE byte_fallback (sentencepiece-style BPE)")
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, unsupported("BPE continuing_subword_prefix")
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, unsupported("BPE end_of_word_suffix")
	}
	b := &bpe{
		tokens:       m.Vocab,
		vocab:        make(map[string]uint32, len(m.Vocab)),
		ignoreMerges: m.IgnoreMerges,
	}
	for s, id := range m.Vocab {
		raw, ok := byteLevelRaw(s)
		if !ok {
			continue // cannot come out of byte-level pre-tokenization
		}
		b.vocab[raw] = id
		if len(raw) == 1 {
			b.byteID[raw[0]] = id
			b.byteOK[raw[0]] = true
		}
	}
	pairs, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	b.merges = make(map[uint64]uint64, len(pairs))
	for rank, p := range pairs {
		l, ok1 := m.Vocab[p[0]]
		r, ok2 := m.Vocab[p[1]]
		n, ok3 := m.Vocab[p[0]+p[1]]
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("tokenizer.json: merge %q %q refers to a token not in the vocabulary", p[0], p[1])
		}
		k := uint64(l)<<32 | uint64(r)
		if _, dup := b.merges[k]; !dup { // the first (best) rank wins, as in HF
			b.merges[k] = uint64(rank)<<32 | uint64(n)
		}
	}
	b.cache.init()
	if b.ignoreMerges {
		b.whole = newWordTable(b.vocab)
	} else {
		self := make(map[string]uint32, len(b.vocab))
		var buf [8]uint32
		for w, id := range b.vocab {
			var ids []uint32
			if len(w) <= smallWord {
				ids = b.mergeSmall(buf[:0], w)
			} else {
				ids = b.mergeLarge(buf[:0], w)
			}
			if len(ids) == 1 && ids[0] == id {
				self[w] = id
			}
		}
		b.whole = newWordTable(self)
	}
	return b, nil
}

func byteLevelRaw(s string) (string, bool) {
	var buf [64]byte
	out := buf[:0]
	for _, r := range s {
		c, ok := charBytes[r]
		if !ok {
			return "", false
		}
		out = append(out, c)
	}
	return string(out), true
}

// parseMerges reads both spellings: "a b" strings (tokenizers < 0.20) and ["a", "b"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if !isSet(raw) {
		return nil, nil
	}
	var pairs [][2]string
	if t := strings.TrimLeft(string(raw), " \t\r\n["); t == "" || t[0] != '"' {
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, fmt.Errorf("tokenizer.json: merges: %w", err)
		}
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("tokenizer.json: merges: %w", err)
	}
	pairs = make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok {
			return nil, fmt.Errorf("tokenizer.json: merge %q is not a pair", l)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

const noMerge = ^uint64(0)

func (b *bpe) pairRank(l, r uint32) uint64 {
	if v, ok := b.merges[uint64(l)<<32|uint64(r)]; ok {
		return v
	}
	return noMerge
}

// encodeWord appends the ids of one pre-token (raw bytes).
func (b *bpe) encodeWord(dst []uint32, word string) []uint32 {
	if id, ok := b.whole.get(word); ok {
		return append(dst, id)
	}
	if len(word) == 1 {
		if b.byteOK[word[0]] {
			return append(dst, b.byteID[word[0]])
		}
		return dst
	}
	cacheable := len(word) <= maxCachedWord
	if cacheable {
		if ids, ok := b.cache.get(word); ok {
			return append(dst, ids...)
		}
	}
	start := len(dst)
	if len(word) <= smallWord {
		dst = b.mergeSmall(dst, word)
	} else {
		dst = b.mergeLarge(dst, word)
	}
	if cacheable {
		b.cache.put(word, dst[start:])
	}
	return dst
}

const (
	smallWord     = 48
	maxCachedWord = 256
)

// mergeSmall applies merges to a short word with arrays on the stack: the lowest-ranked adjacent
// pair first, the leftmost among equals, which is the order HF's heap pops them in.
func (b *bpe) mergeSmall(dst []uint32, word string) []uint32 {
	var idsBuf [smallWord]uint32
	var rankBuf [smallWord]uint64
	ids := idsBuf[:0]
	for i := 0; i < len(word); i++ {
		if b.byteOK[word[i]] {
			ids = append(ids, b.byteID[word[i]])
		}
	}
	if len(ids) == 0 {
		return dst
	}
	ranks := rankBuf[:len(ids)-1]
	for i := range ranks {
		ranks[i] = b.pairRank(ids[i], ids[i+1])
	}
	for len(ranks) > 0 {
		best := 0
		for i := 1; i < len(ranks); i++ {
			if ranks[i] < ranks[best] {
				best = i
			}
		}
		if ranks[best] == noMerge {
			break
		}
		ids[best] = uint32(ranks[best])
		copy(ids[best+1:], ids[best+2:])
		ids = ids[:len(ids)-1]
		copy(ranks[best:], ranks[best+1:])
		ranks = ranks[:len(ranks)-1]
		if best > 0 {
			ranks[best-1] = b.pairRank(ids[best-1], ids[best])
		}
		if best < len(ranks) {
			ranks[best] = b.pairRank(ids[best], ids[best+1])
		}
	}
	return append(dst, ids...)
}

// mergeLarge is the same order with a heap and a linked list, for long words (CJK runs, long
// numbers in Llama-3's one-to-three digit pieces never get here, base64 blobs do).
func (b *bpe) mergeLarge(dst []uint32, word string) []uint32 {
	n := len(word)
	ids := make([]uint32, 0, n)
	for i := 0; i < n; i++ {
		if b.byteOK[word[i]] {
			ids = append(ids, b.byteID[word[i]])
		}
	}
	n = len(ids)
	next := make([]int32, n)
	prev := make([]int32, n)
	alive := make([]bool, n)
	for i := range ids {
		next[i] = int32(i + 1)
		prev[i] = int32(i - 1)
		alive[i] = true
	}
	if n > 0 {
		next[n-1] = -1
	}
	h := make(mergeHeap, 0, n)
	for i := 0; i+1 < n; i++ {
		if r := b.pairRank(ids[i], ids[i+1]); r != noMerge {
			h = append(h, heapItem{r >> 32, int32(i)})
		}
	}
	h.init()
	for len(h) > 0 {
		it := h.pop()
		i := it.pos
		if !alive[i] || next[i] < 0 {
			continue
		}
		j := next[i]
		r := b.pairRank(ids[i], ids[j])
		if r == noMerge || r>>32 != it.rank {
			continue
		}
		ids[i] = uint32(r)
		alive[j] = false
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		if p := prev[i]; p >= 0 {
			if r := b.pairRank(ids[p], ids[i]); r != noMerge {
				h.push(heapItem{r >> 32, p})
			}
		}
		if nx := next[i]; nx >= 0 {
			if r := b.pairRank(ids[i], ids[nx]); r != noMerge {
				h.push(heapItem{r >> 32, i})
			}
		}
	}
	for i := 0; i < n; i++ {
		if alive[i] {
			dst = append(dst, ids[i])
		}
	}
	return dst
}

type heapItem struct {
	rank uint64
	pos  int32
}

// mergeHeap is a binary min-heap on (rank, pos); container/heap's interface calls cost more than
// the merges here.
type mergeHeap []heapItem

func (h mergeHeap) less(a, b int) bool {
	if h[a].rank != h[b].rank {
		return h[a].rank < h[b].rank
	}
	return h[a].pos < h[b].pos
}

func (h mergeHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h mergeHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func (h *mergeHeap) push(it heapItem) {
	*h = append(*h, it)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() heapItem {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	if last > 0 {
		(*h).down(0)
	}
	return top
}

// wordCache remembers the ids of words already merged. Prose repeats its words, so most pre-tokens
// of a long prompt are hits; it is sharded so concurrent requests rarely share a lock, and a shard
// that fills up is dropped whole rather than tracked for recency, which costs nothing per hit.
type wordCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

const (
	cacheShards   = 64
	cacheShardCap = 4096
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]uint32
	_  [40]byte // keep shards on separate cache lines
}

func (c *wordCache) init() {
	c.seed = maphash.MakeSeed()
	for i := range c.shards {
		c.shards[i].m = make(map[string][]uint32)
	}
}

func (c *wordCache) shard(w string) *cacheShard {
	return &c.shards[maphash.String(c.seed, w)%cacheShards]
}

func (c *wordCache) get(w string) ([]uint32, bool) {
	s := c.shard(w)
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []uint32) {
	s := c.shard(w)
	v := append([]uint32(nil), ids...)
	k := strings.Clone(w) // w is a slice of the caller's prompt: do not pin it
	s.mu.Lock()
	if len(s.m) >= cacheShardCap {
		clear(s.m)
	}
	s.m[k] = v
	s.mu.Unlock()
}

func (c *wordCache) reset() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.mu.Unlock()
	}
}
