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

package workload

import (
	"strings"

	"github.com/kvrouter/kvrouter/internal/sim/tokenizer"
)

// Synthetic prompts are drawn from a vocabulary of three-letter words. The simulator's tokenizer
// turns " xyz" into exactly one token, so the same prompt has the same token ids in simulation
// (where kvbench hands the engine token ids) and in live mode (where it sends the text and the
// engine or router tokenizes it): prefix sharing is identical in both modes.
const vocabSize = 26 * 26 * 26

var (
	vocabText [vocabSize]string
	vocabIDs  [vocabSize]uint32
)

func init() {
	for i := range vocabSize {
		w := []byte{' ', byte('a' + i/676), byte('a' + (i/26)%26), byte('a' + i%26)}
		vocabText[i] = string(w)
		vocabIDs[i] = tokenizer.PieceID(vocabText[i])
	}
}

// Segment is a run of prompt tokens drawn deterministically from Seed. Two segments with the same
// seed share their leading tokens, so a shorter one is a prefix of a longer one (which is how a
// trace's partial last block relates to the same block in full).
type Segment struct {
	Seed uint64
	Len  int
}

// word returns the vocabulary index of the i-th word of a segment seeded with seed.
func word(seed uint64, i int) int {
	return int(mix64(seed^mix64(uint64(i)+0x51ed2701)) % vocabSize)
}

// AppendTokens appends the segment's token ids to dst.
func (s Segment) AppendTokens(dst []uint32) []uint32 {
	for i := range s.Len {
		dst = append(dst, vocabIDs[word(s.Seed, i)])
	}
	return dst
}

// AppendText appends the segment's text (one word per token) to b.
func (s Segment) AppendText(b *strings.Builder) {
	for i := range s.Len {
		b.WriteString(vocabText[word(s.Seed, i)])
	}
}

// mix64 is the splitmix64 finaliser: cheap, well distributed, and stable across releases (the
// workloads must be reproducible from a seed forever, so no library RNG decides token ids).
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// SeedOf derives a segment seed from a workload seed and a path of integers (group, user, ...).
func SeedOf(base uint64, path ...uint64) uint64 {
	h := mix64(base)
	for _, p := range path {
		h = mix64(h ^ p)
	}
	return h
}
