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

// Command prune writes a small tokenizer.json that tokenizes a corpus exactly as a full one does:
// every added token and every setting is kept, but the vocabulary shrinks to the tokens the corpus
// produced or passed through, and the merges to those BPE applied, in their original order and
// with their original ids. Merges never applied while encoding the corpus cannot change its
// encoding (a merge that was applicable but lost to a better-ranked one still loses, and one that
// never applied is absent from every step), so the pruned file is exact on the corpus.
//
// It re-implements byte-level BPE naively on purpose, pre-tokenizing with regexp2: it is a second
// implementation, and internal/tokenizer's tests then check the pruned file against the captured
// ids.
//
// usage: go run ./hack/tokenizer-fixtures/prune -full DIR/tokenizer.json -expected expected.json -out tokenizer.json
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

func main() {
	full := flag.String("full", "", "the full tokenizer.json")
	exp := flag.String("expected", "", "expected.json written by capture.js (its texts and chat renders are the corpus)")
	out := flag.String("out", "", "where to write the pruned tokenizer.json")
	flag.Parse()
	if *full == "" || *exp == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*full, *exp, *out); err != nil {
		log.Fatal(err)
	}
}

type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	Normalized bool   `json:"normalized"`
}

func run(fullPath, expPath, outPath string) error {
	raw, err := os.ReadFile(fullPath)
	if err != nil {
		return err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return err
	}
	var model map[string]json.RawMessage
	if err := json.Unmarshal(top["model"], &model); err != nil {
		return err
	}
	var vocab map[string]int
	if err := json.Unmarshal(model["vocab"], &vocab); err != nil {
		return err
	}
	merges, stringMerges, err := readMerges(model["merges"])
	if err != nil {
		return err
	}
	var added []addedToken
	if err := json.Unmarshal(top["added_tokens"], &added); err != nil {
		return err
	}
	var ignoreMerges bool
	_ = json.Unmarshal(model["ignore_merges"], &ignoreMerges)
	nfc := strings.Contains(string(top["normalizer"]), `"NFC"`)
	pattern, err := splitPattern(top["pre_tokenizer"])
	if err != nil {
		return err
	}
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return err
	}
	corpus, err := readCorpus(expPath)
	if err != nil {
		return err
	}

	rank := make(map[[2]string]int, len(merges))
	for i, m := range merges {
		if _, dup := rank[m]; !dup {
			rank[m] = i
		}
	}
	keepTok := map[string]bool{}
	for b := 0; b < 256; b++ {
		keepTok[string(byteChar[b])] = true
	}
	keepMerge := map[int]bool{}
	words := 0
	for _, text := range corpus {
		for _, section := range splitAdded(text, added) {
			if nfc {
				section = norm.NFC.String(section)
			}
			for _, w := range pieces(re, section) {
				words++
				for _, tok := range bpe(byteLevel(w), vocab, rank, ignoreMerges, keepMerge) {
					keepTok[tok] = true
				}
			}
		}
	}
	var keptMerges [][2]string
	idx := make([]int, 0, len(keepMerge))
	for i := range keepMerge {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		m := merges[i]
		keepTok[m[0]], keepTok[m[1]], keepTok[m[0]+m[1]] = true, true, true
		keptMerges = append(keptMerges, m)
	}
	newVocab := map[string]int{}
	for tok := range keepTok {
		id, ok := vocab[tok]
		if !ok {
			continue // a byte the vocabulary lacks
		}
		newVocab[tok] = id
	}

	if model["vocab"], err = marshalVocab(newVocab); err != nil {
		return err
	}
	if stringMerges {
		lines := make([]string, len(keptMerges))
		for i, m := range keptMerges {
			lines[i] = m[0] + " " + m[1]
		}
		model["merges"], err = marshalNoEscape(lines)
	} else {
		model["merges"], err = marshalNoEscape(keptMerges)
	}
	if err != nil {
		return err
	}
	if top["model"], err = marshalOrdered(model, []string{"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"}); err != nil {
		return err
	}
	b, err := marshalOrdered(top, []string{"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder", "model"})
	if err != nil {
		return err
	}
	if err := os.WriteFile(outPath, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %d texts, %d words: kept %d of %d vocab entries, %d of %d merges\n", outPath, len(corpus), words, len(newVocab), len(vocab), len(keptMerges), len(merges))
	return nil
}

func readMerges(raw json.RawMessage) ([][2]string, bool, error) {
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, false, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, false, err
	}
	pairs = nil // the failed attempt above may have filled it partly
	for _, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok {
			return nil, false, fmt.Errorf("merge %q", l)
		}
		pairs = append(pairs, [2]string{a, b})
	}
	return pairs, true, nil
}

// splitPattern finds the single regex the pre-tokenizer splits on.
func splitPattern(raw json.RawMessage) (string, error) {
	var p struct {
		Type          string `json:"type"`
		UseRegex      *bool  `json:"use_regex"`
		Pretokenizers []struct {
			Type    string `json:"type"`
			Pattern struct {
				Regex string `json:"Regex"`
			} `json:"pattern"`
		} `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", err
	}
	if p.Type == "ByteLevel" {
		return `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`, nil
	}
	for _, s := range p.Pretokenizers {
		if s.Type == "Split" {
			return s.Pattern.Regex, nil
		}
	}
	return "", fmt.Errorf("no Split pre-tokenizer")
}

func readCorpus(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var e struct {
		Encode []struct {
			Text string `json:"text"`
		} `json:"encode"`
		Chat []struct {
			Rendered string `json:"rendered"`
		} `json:"chat"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return nil, err
	}
	var out []string
	for _, x := range e.Encode {
		out = append(out, x.Text)
	}
	for _, x := range e.Chat {
		out = append(out, x.Rendered)
	}
	return out, nil
}

// splitAdded removes added tokens (leftmost, longest), leaving the text between them.
func splitAdded(s string, added []addedToken) []string {
	var out []string
	last := 0
	for i := 0; i < len(s); {
		best := ""
		for _, a := range added {
			if len(a.Content) > len(best) && strings.HasPrefix(s[i:], a.Content) {
				best = a.Content
			}
		}
		if best == "" {
			i++
			continue
		}
		if i > last {
			out = append(out, s[last:i])
		}
		i += len(best)
		last = i
	}
	if last < len(s) {
		out = append(out, s[last:])
	}
	return out
}

// pieces splits as HF's Split with the Isolated behaviour.
func pieces(re *regexp2.Regexp, s string) []string {
	rs := []rune(s)
	var out []string
	last := 0
	m, _ := re.FindRunesMatch(rs)
	for m != nil {
		if m.Index > last {
			out = append(out, string(rs[last:m.Index]))
		}
		if m.Length > 0 {
			out = append(out, string(rs[m.Index:m.Index+m.Length]))
		}
		last = m.Index + m.Length
		m, _ = re.FindNextMatch(m)
	}
	if last < len(rs) {
		out = append(out, string(rs[last:]))
	}
	return out
}

var byteChar = func() (t [256]rune) {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}()

func byteLevel(s string) []string {
	out := make([]string, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = string(byteChar[s[i]])
	}
	return out
}

// bpe merges the lowest-ranked adjacent pair, leftmost first, recording each merge it applies.
func bpe(syms []string, vocab map[string]int, rank map[[2]string]int, ignoreMerges bool, applied map[int]bool) []string {
	if ignoreMerges {
		if _, ok := vocab[strings.Join(syms, "")]; ok {
			return []string{strings.Join(syms, "")}
		}
	}
	for {
		best, bestRank := -1, 0
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := rank[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < bestRank) {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			return syms
		}
		applied[bestRank] = true
		syms = append(syms[:best], append([]string{syms[best] + syms[best+1]}, syms[best+2:]...)...)
	}
}

func marshalNoEscape(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(buf.Bytes()), nil
}

// marshalVocab writes the vocabulary in id order, as tokenizers does.
func marshalVocab(v map[string]int) (json.RawMessage, error) {
	toks := make([]string, 0, len(v))
	for t := range v {
		toks = append(toks, t)
	}
	sort.Slice(toks, func(i, j int) bool { return v[toks[i]] < v[toks[j]] })
	var buf bytes.Buffer
	buf.WriteString("{")
	for i, t := range toks {
		if i > 0 {
			buf.WriteString(",")
		}
		k, err := marshalNoEscape(t)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&buf, "\n  %s: %d", k, v[t])
	}
	buf.WriteString("\n}")
	return buf.Bytes(), nil
}

// marshalOrdered writes m's keys in the given order, then any others sorted.
func marshalOrdered(m map[string]json.RawMessage, order []string) (json.RawMessage, error) {
	seen := map[string]bool{}
	keys := []string{}
	for _, k := range order {
		if _, ok := m[k]; ok {
			keys = append(keys, k)
			seen[k] = true
		}
	}
	var rest []string
	for k := range m {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	keys = append(keys, rest...)
	var buf bytes.Buffer
	buf.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			buf.WriteString(",")
		}
		fmt.Fprintf(&buf, "\n%q: %s", k, m[k])
	}
	buf.WriteString("\n}")
	return buf.Bytes(), nil
}
