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
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedVocab finds added tokens in text before anything else sees it, as HF's AddedVocabulary
// does: the tokens not marked normalized are matched on the raw text, the normalized ones on each
// remaining stretch after normalization.
type addedVocab struct {
	raw        *matcher
	normalized *matcher
}

type addedToken struct {
	id                         uint32
	lstrip, rstrip, singleWord bool
}

// matcher is a byte trie answering "the longest added token starting here", which with a
// left-to-right scan is the leftmost-longest match HF's Aho-Corasick automaton reports.
type matcher struct {
	first [256]bool
	// only is the first byte of every token when they share one ('<' in most models), so the
	// scan for candidates can use IndexByte; -1 otherwise.
	only  int
	nodes []trieNode
}

type trieNode struct {
	next  map[byte]int32
	token *addedToken
}

func newAddedVocab(tokens []addedTokenJSON) (*addedVocab, error) {
	a := &addedVocab{}
	for _, t := range tokens {
		if t.Content == "" {
			return nil, fmt.Errorf("tokenizer.json: added token %d is empty", t.ID)
		}
		m := &a.raw
		if t.Normalized {
			m = &a.normalized
		}
		if *m == nil {
			*m = &matcher{nodes: []trieNode{{}}, only: int(t.Content[0])}
		}
		(*m).add(t)
	}
	return a, nil
}

func (m *matcher) add(t addedTokenJSON) {
	m.first[t.Content[0]] = true
	if m.only != int(t.Content[0]) {
		m.only = -1
	}
	n := int32(0)
	for i := 0; i < len(t.Content); i++ {
		c := t.Content[i]
		nx, ok := m.nodes[n].next[c]
		if !ok {
			if m.nodes[n].next == nil {
				m.nodes[n].next = map[byte]int32{}
			}
			nx = int32(len(m.nodes))
			m.nodes = append(m.nodes, trieNode{})
			m.nodes[n].next[c] = nx
		}
		n = nx
	}
	m.nodes[n].token = &addedToken{id: t.ID, lstrip: t.LStrip, rstrip: t.RStrip, singleWord: t.SingleWord}
}

// longest returns the token matching longest at s[i:] and its end.
func (m *matcher) longest(s string, i int) (*addedToken, int) {
	var best *addedToken
	end := 0
	n := int32(0)
	for j := i; j < len(s); j++ {
		nx, ok := m.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = nx
		if t := m.nodes[n].token; t != nil {
			best, end = t, j+1
		}
	}
	return best, end
}

type sectionFunc func(dst []uint32, s string) []uint32

func (a *addedVocab) split(s string, dst []uint32, section sectionFunc) []uint32 {
	return a.raw.split(s, dst, section)
}

func (a *addedVocab) splitNormalized(s string, dst []uint32, section sectionFunc) []uint32 {
	return a.normalized.split(s, dst, section)
}

// split hands the stretches between added tokens to section and appends the tokens' ids, applying
// single_word, lstrip and rstrip as HF's find_matches does.
func (m *matcher) split(s string, dst []uint32, section sectionFunc) []uint32 {
	if m == nil {
		return section(dst, s)
	}
	done := 0 // s[:done] is handled
	for i := 0; i < len(s); {
		if m.only >= 0 {
			k := strings.IndexByte(s[i:], byte(m.only))
			if k < 0 {
				break
			}
			i += k
		} else if !m.first[s[i]] {
			i++
			continue
		}
		t, end := m.longest(s, i)
		if t == nil {
			i++
			continue
		}
		start := i
		if t.singleWord && (endsWithWord(s[:start]) || startsWithWord(s[end:])) {
			i = end // the automaton has consumed the match even though it is dropped
			continue
		}
		if t.lstrip {
			start = max(leftSpace(s, start), done)
		}
		if t.rstrip {
			end = rightSpace(s, end)
		}
		if start > done {
			dst = section(dst, s[done:start])
		}
		dst = append(dst, t.id)
		done, i = end, end
	}
	if done < len(s) {
		dst = section(dst, s[done:])
	}
	return dst
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordRune(r)
}

func leftSpace(s string, i int) int {
	for i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= n
	}
	return i
}

func rightSpace(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += n
	}
	return i
}
