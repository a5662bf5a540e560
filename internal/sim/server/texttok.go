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

package server

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kvrouter/kvrouter/internal/sim/tokenizer"
	hftok "github.com/kvrouter/kvrouter/internal/tokenizer"
)

// textTokenizer is how an engine turns prompts into ids and ids into text: the synthetic
// tokenizer by default, or a model's real tokenizer.json (--tokenizer), with which the router's
// in-process tokenizer is tested against the engine.
type textTokenizer interface {
	encode(text string, addSpecial bool) []uint32
	// chat renders the conversation with the chat template and encodes it, as vLLM does.
	chat(c chatArgs) ([]uint32, error)
	decode(ids []uint32, skipSpecial bool) string
}

// chatArgs is what a chat request (or /tokenize's chat form) gives the chat template.
type chatArgs struct {
	msgs                  chatMessages
	tools, kwargs         json.RawMessage
	template              *string
	addGen, cont, special bool
}

// chatMessages is a request's "messages": parsed for the synthetic template, and kept as sent
// for a real one, which reads every field of a message (tool calls, names, content parts).
type chatMessages struct {
	list []chatMessage
	raw  json.RawMessage
}

func (m *chatMessages) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if err := json.Unmarshal(b, &m.list); err != nil {
		return err
	}
	m.raw = append(json.RawMessage(nil), b...)
	return nil
}

// given is true when the request had messages (even an empty list).
func (m *chatMessages) given() bool { return m.raw != nil }

// synthetic is the built-in stand-in tokenizer.
type synthetic struct{ t *tokenizer.Tokenizer }

func (s synthetic) encode(text string, addSpecial bool) []uint32 { return s.t.Encode(text, addSpecial) }

func (s synthetic) decode(ids []uint32, skipSpecial bool) string { return s.t.Decode(ids, skipSpecial) }

func (s synthetic) chat(c chatArgs) ([]uint32, error) {
	tm := make([]tokenizer.Message, len(c.msgs.list))
	for i, m := range c.msgs.list {
		txt, err := m.text()
		if err != nil {
			return nil, err
		}
		tm[i] = tokenizer.Message{Role: m.Role, Content: txt}
	}
	return s.t.ApplyChatTemplate(tm, tokenizer.ChatOptions{AddGenerationPrompt: c.addGen, ContinueFinalMessage: c.cont, AddSpecialTokens: c.special}), nil
}

// hfTokenizer is a model's tokenizer.json and chat template.
type hfTokenizer struct{ t *hftok.Tokenizer }

func (r hfTokenizer) encode(text string, addSpecial bool) []uint32 {
	return r.t.Encode(text, addSpecial)
}

// decode leaves special tokens in: the ids the simulated model samples are never special, so
// skipSpecial matters only for /detokenize of a prompt, which vLLM renders with them too.
func (r hfTokenizer) decode(ids []uint32, _ bool) string { return r.t.Decode(ids) }

func (r hfTokenizer) chat(c chatArgs) ([]uint32, error) {
	in := hftok.ChatInput{Messages: c.msgs.raw, Tools: c.tools, AddGenerationPrompt: c.addGen,
		ContinueFinalMessage: c.cont, ChatTemplateKwargs: c.kwargs}
	if c.template != nil {
		in.ChatTemplate = *c.template
	}
	ids, err := r.t.EncodeChat(in, c.special)
	if err != nil {
		// vLLM answers a template that fails on the request with a 400.
		return nil, badRequest("chat template: %v", err)
	}
	return ids, nil
}

// LoadTokenizer loads a model's tokenizer from dir for --tokenizer.
func LoadTokenizer(dir string) (*hftok.Tokenizer, error) {
	t, err := hftok.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", dir, err)
	}
	return t, nil
}

// outputVocab is what the simulated model says with a real tokenizer: the ids of the synthetic
// model's words as that tokenizer encodes them, ordinary text, so every id is valid, below the
// vocabulary size, never a special token, and decodes to readable text.
func outputVocab(t *hftok.Tokenizer) []uint32 {
	ids := t.Encode(" "+strings.Join(tokenizer.Words(), " "), false)
	seen := make(map[uint32]bool, len(ids))
	out := make([]uint32, 0, len(ids))
	for _, id := range ids {
		if !seen[id] && int(id) < t.VocabSize() {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
