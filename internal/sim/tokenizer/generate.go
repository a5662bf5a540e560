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

// Generator produces the simulated model's output: a deterministic word stream chosen by a
// splitmix64 sequence from the request's seed. Every word is one token with a leading space, so the
// generated text re-tokenizes to exactly the generated ids; a client that sends the answer back in
// the next turn of a conversation therefore hits the cached blocks, as with a real model.
type Generator struct {
	state uint64
	vocab []uint32
}

// NewGenerator starts a stream; the same seed always yields the same tokens.
func NewGenerator(seed uint64) *Generator { return &Generator{state: seed ^ 0x9e3779b97f4a7c15} }

// NewGeneratorOver is NewGenerator drawing its ids from vocab instead (a real tokenizer's ids of
// ordinary text, so that every id it yields is valid and decodes to text); empty vocab: the
// synthetic words. Next returns no text then: the caller's tokenizer decodes the ids.
func NewGeneratorOver(seed uint64, vocab []uint32) *Generator {
	g := NewGenerator(seed)
	g.vocab = vocab
	return g
}

// Next returns the next token id and its text.
func (g *Generator) Next() (uint32, string) {
	g.state += 0x9e3779b97f4a7c15
	z := g.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	if len(g.vocab) > 0 {
		return g.vocab[z%uint64(len(g.vocab))], ""
	}
	w := " " + words[z%uint64(len(words))]
	return PieceID(w), w
}

// Words are the words the synthetic model says, for a real tokenizer to make its output
// vocabulary of.
func Words() []string { return append([]string(nil), words...) }

var words = []string{
	"the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by",
	"on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had",
	"they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if",
	"more", "when", "will", "would", "who", "so", "no", "time", "cache", "model", "token", "request",
	"router", "engine", "prefix", "block", "memory", "latency", "throughput", "batch", "queue",
	"system", "data", "result", "value", "answer", "question", "because", "however", "therefore",
	"first", "second", "next", "then", "finally", "example", "simple", "large", "small", "fast",
	"slow", "good", "new", "old", "long", "short", "high", "low", "many", "few", "each", "every",
	"other", "such", "only", "also", "very", "well", "still", "just", "like", "over", "after",
	"before", "under", "between", "through", "during", "without", "within", "against", "among",
	"server", "client", "network", "compute", "storage", "layer", "attention", "weight", "vector",
	"matrix", "kernel", "stream", "event", "signal", "score", "policy", "load", "balance", "route",
}
