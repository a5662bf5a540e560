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
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ardanlabs/jinja"
)

// ChatInput is what an OpenAI-style chat request carries that the chat template reads.
type ChatInput struct {
	Messages             json.RawMessage // the client's "messages" array as sent
	Tools                json.RawMessage // may be nil
	AddGenerationPrompt  bool
	ContinueFinalMessage bool
	ChatTemplate         string          // overrides the model's template when not empty
	ChatTemplateKwargs   json.RawMessage // extra variables, may be nil
}

// chatConfig is what tokenizer_config.json gives the chat path.
type chatConfig struct {
	templates map[string]string // "default", "tool_use", ... (a plain string template is "default")
	special   map[string]jinja.Value
	compiled  sync.Map // template source -> *compiledTemplate
	now       func() time.Time
}

type compiledTemplate struct {
	tmpl *jinja.Template
	err  error
	// openAIContent: the template loops over a message's content, so vLLM hands it content as a
	// list of parts rather than a joined string.
	openAIContent bool
}

func loadChatConfig(raw []byte) (*chatConfig, error) {
	c := &chatConfig{templates: map[string]string{}, special: map[string]jinja.Value{}, now: time.Now}
	if len(raw) == 0 {
		return c, nil
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	if ct, ok := cfg["chat_template"]; ok && isSet(ct) {
		var s string
		if err := json.Unmarshal(ct, &s); err == nil {
			c.templates["default"] = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(ct, &named); err != nil {
				return nil, fmt.Errorf("tokenizer_config.json: chat_template: %w", err)
			}
			for _, n := range named {
				c.templates[n.Name] = n.Template
			}
		}
	}
	// HF passes special_tokens_map to the template: these names, as strings.
	for _, name := range []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"} {
		if v, ok := cfg[name]; ok {
			if s, ok := tokenString(v); ok {
				c.special[name] = jinja.NewString(s)
			}
		}
	}
	if v, ok := cfg["additional_special_tokens"]; ok {
		var list []json.RawMessage
		if json.Unmarshal(v, &list) == nil && len(list) > 0 {
			items := make([]jinja.Value, 0, len(list))
			for _, e := range list {
				if s, ok := tokenString(e); ok {
					items = append(items, jinja.NewString(s))
				}
			}
			c.special["additional_special_tokens"] = jinja.NewList(items)
		}
	}
	for _, src := range c.templates {
		c.compile(src) // so a template the engine cannot parse shows up at load, in logs of callers
	}
	return c, nil
}

// tokenString reads a special token written as a string or as an AddedToken object.
func tokenString(raw json.RawMessage) (string, bool) {
	if !isSet(raw) {
		return "", false // null: HF leaves it out of the template's variables
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Content != nil {
		return *obj.Content, true
	}
	return "", false
}

var contentLoop = regexp.MustCompile(`for\s+\w+\s+in\s+\w+(\[\s*['"]content['"]\s*\]|\.content)`)

func (c *chatConfig) compile(src string) *compiledTemplate {
	if v, ok := c.compiled.Load(src); ok {
		return v.(*compiledTemplate)
	}
	ct := &compiledTemplate{openAIContent: contentLoop.MatchString(src)}
	ct.tmpl, ct.err = jinja.Compile(src)
	if ct.err != nil {
		ct.err = unsupported("chat template: %v", ct.err)
	}
	v, _ := c.compiled.LoadOrStore(src, ct)
	return v.(*compiledTemplate)
}

// ErrNoChatTemplate is returned when neither the request nor tokenizer_config.json has a template.
var ErrNoChatTemplate = errors.New("tokenizer: no chat template")

// RenderChat applies the chat template as vLLM's chat path does: messages normalized as vLLM
// parses them, tools as its pydantic models dump them, HF's special tokens, raise_exception and
// strftime_now, and chat_template_kwargs on top.
func (t *Tokenizer) RenderChat(in ChatInput) (string, error) {
	c := t.chat
	if in.AddGenerationPrompt && in.ContinueFinalMessage {
		return "", errors.New("tokenizer: add_generation_prompt and continue_final_message are exclusive")
	}
	src := in.ChatTemplate
	if src == "" {
		switch {
		case isSet(in.Tools) && c.templates["tool_use"] != "":
			src = c.templates["tool_use"]
		case c.templates["default"] != "":
			src = c.templates["default"]
		default:
			return "", ErrNoChatTemplate
		}
	}
	ct := c.compile(src)
	if ct.err != nil {
		return "", ct.err
	}
	msgs, finalText, err := parseMessages(in.Messages, ct.openAIContent)
	if err != nil {
		return "", err
	}
	vars := make(map[string]jinja.Value, 16)
	for k, v := range c.special {
		vars[k] = v
	}
	vars["messages"] = msgs
	vars["tools"] = jinja.None()
	if isSet(in.Tools) {
		tools, err := parseTools(in.Tools)
		if err != nil {
			return "", err
		}
		vars["tools"] = tools
	}
	vars["documents"] = jinja.None()
	vars["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	vars["continue_final_message"] = jinja.NewBool(in.ContinueFinalMessage)
	now := c.now
	vars["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now takes one format string")
		}
		return jinja.NewString(strftime(now(), args[0].AsString())), nil
	})
	if isSet(in.ChatTemplateKwargs) {
		kw, err := jsonValue(in.ChatTemplateKwargs)
		if err != nil {
			return "", fmt.Errorf("chat_template_kwargs: %w", err)
		}
		if !kw.IsDict() {
			return "", errors.New("chat_template_kwargs is not an object")
		}
		d := kw.AsDict()
		for _, k := range d.Keys {
			vars[k] = d.Data[k]
		}
	}
	out, err := ct.tmpl.RenderValues(vars)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	if in.ContinueFinalMessage {
		return continueFinal(out, finalText)
	}
	return out, nil
}

// EncodeChat renders and encodes; vLLM's /tokenize with messages defaults add_special_tokens to
// false, since templates write the BOS themselves.
func (t *Tokenizer) EncodeChat(in ChatInput, addSpecial bool) ([]uint32, error) {
	s, err := t.RenderChat(in)
	if err != nil {
		return nil, err
	}
	return t.Encode(s, addSpecial), nil
}

// continueFinal cuts the render after the last message's text, as HF's apply_chat_template does
// with continue_final_message.
func continueFinal(rendered, final string) (string, error) {
	trimmed := strings.TrimSpace(final)
	loc := strings.LastIndex(rendered, trimmed)
	if loc < 0 {
		return "", errors.New("tokenizer: continue_final_message: the final message does not appear in the rendered chat")
	}
	left := strings.TrimLeft(final, " \t\n\r\v\f")
	if strings.HasPrefix(rendered[loc:], left) && rendered[loc:loc+len(left)] == final {
		return rendered[:loc+len(left)], nil
	}
	return rendered[:loc+len(trimmed)], nil
}

// parseMessages turns the request's messages into what vLLM hands the template: role and content
// (a string, the text parts joined by newlines, unless the template iterates over content), name,
// tool_calls with their arguments decoded from JSON, and tool_call_id. It also returns the last
// message's text for continue_final_message.
func parseMessages(raw json.RawMessage, openAIContent bool) (jinja.Value, string, error) {
	v, err := jsonValue(raw)
	if err != nil {
		return jinja.Value{}, "", fmt.Errorf("messages: %w", err)
	}
	if !v.IsList() {
		return jinja.Value{}, "", errors.New("messages is not an array")
	}
	in := v.AsList().Items
	out := make([]jinja.Value, 0, len(in))
	final := ""
	for i, m := range in {
		if !m.IsDict() {
			return jinja.Value{}, "", fmt.Errorf("messages[%d] is not an object", i)
		}
		d := m.AsDict()
		role, ok := d.Get("role")
		if !ok || !role.IsString() {
			return jinja.Value{}, "", fmt.Errorf("messages[%d] has no role", i)
		}
		msg := jinja.NewDict()
		md := msg.AsDict()
		md.Set("role", role)
		content, _ := d.Get("content")
		texts, err := contentTexts(content)
		if err != nil {
			return jinja.Value{}, "", fmt.Errorf("messages[%d]: %w", i, err)
		}
		final = strings.Join(texts, "\n")
		if openAIContent {
			parts := make([]jinja.Value, 0, len(texts))
			for _, s := range texts {
				p := jinja.NewDict()
				p.AsDict().Set("type", jinja.NewString("text"))
				p.AsDict().Set("text", jinja.NewString(s))
				parts = append(parts, p)
			}
			md.Set("content", jinja.NewList(parts))
		} else {
			md.Set("content", jinja.NewString(final))
		}
		if name, ok := d.Get("name"); ok && name.IsString() {
			md.Set("name", name)
		}
		if r := role.AsString(); r == "assistant" {
			if tc, ok := d.Get("tool_calls"); ok && tc.IsList() {
				for _, call := range tc.AsList().Items {
					decodeArguments(call)
				}
				md.Set("tool_calls", tc)
			}
		} else if r == "tool" {
			if id, ok := d.Get("tool_call_id"); ok {
				md.Set("tool_call_id", id)
			}
		}
		out = append(out, msg)
	}
	return jinja.NewList(out), final, nil
}

func contentTexts(content jinja.Value) ([]string, error) {
	switch {
	case content.IsUndefined() || content.IsNone():
		return nil, nil
	case content.IsString():
		return []string{content.AsString()}, nil
	case content.IsList():
		var texts []string
		for _, p := range content.AsList().Items {
			if !p.IsDict() {
				return nil, errors.New("content part is not an object")
			}
			typ, _ := p.AsDict().Get("type")
			text, ok := p.AsDict().Get("text")
			if (typ.IsString() && typ.AsString() != "text") || !ok || !text.IsString() {
				return nil, unsupported("chat content part other than text")
			}
			texts = append(texts, text.AsString())
		}
		return texts, nil
	}
	return nil, errors.New("content is neither a string nor an array")
}

func decodeArguments(call jinja.Value) {
	if !call.IsDict() {
		return
	}
	fn, ok := call.AsDict().Get("function")
	if !ok || !fn.IsDict() {
		return
	}
	args, ok := fn.AsDict().Get("arguments")
	if !ok || !args.IsString() {
		return
	}
	if v, err := jsonValue([]byte(args.AsString())); err == nil {
		fn.AsDict().Set("arguments", v)
	}
}

// parseTools lays each tool out as vLLM's pydantic model_dump does: type, then function with
// name, description and parameters (null when absent), then any extra fields in request order.
func parseTools(raw json.RawMessage) (jinja.Value, error) {
	v, err := jsonValue(raw)
	if err != nil {
		return jinja.Value{}, fmt.Errorf("tools: %w", err)
	}
	if !v.IsList() {
		return jinja.Value{}, errors.New("tools is not an array")
	}
	out := make([]jinja.Value, 0, v.AsList().Len())
	for _, tool := range v.AsList().Items {
		if !tool.IsDict() {
			return jinja.Value{}, errors.New("tool is not an object")
		}
		td := tool.AsDict()
		fn, ok := td.Get("function")
		if !ok || !fn.IsDict() {
			return jinja.Value{}, errors.New("tool has no function")
		}
		f := jinja.NewDict()
		fd := f.AsDict()
		for _, k := range []string{"name", "description", "parameters"} {
			if x, ok := fn.AsDict().Get(k); ok {
				fd.Set(k, x)
			} else {
				fd.Set(k, jinja.None())
			}
		}
		for _, k := range fn.AsDict().Keys {
			if !fd.Has(k) {
				fd.Set(k, fn.AsDict().Data[k])
			}
		}
		t := jinja.NewDict()
		typ, ok := td.Get("type")
		if !ok {
			typ = jinja.NewString("function")
		}
		t.AsDict().Set("type", typ)
		t.AsDict().Set("function", f)
		for _, k := range td.Keys {
			if !t.AsDict().Has(k) {
				t.AsDict().Set(k, td.Data[k])
			}
		}
		out = append(out, t)
	}
	return jinja.NewList(out), nil
}

// jsonValue decodes JSON into template values keeping object key order, which tojson shows.
func jsonValue(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, err
	}
	if dec.More() {
		return jinja.Value{}, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		}
	case string:
		return jinja.NewString(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case nil:
		return jinja.None(), nil
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return jinja.NewInt(i), nil
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return jinja.Value{}, err
		}
		return jinja.NewFloat(f), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

// strftime formats t as Python's datetime.strftime does for the directives chat templates use.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		d := format[i]
		pad := true
		if d == '-' && i+1 < len(format) { // glibc's no-padding flag
			pad = false
			i++
			d = format[i]
		}
		num := func(n, width int) {
			s := strconv.Itoa(n)
			if pad {
				for len(s) < width {
					s = "0" + s
				}
			}
			b.WriteString(s)
		}
		switch d {
		case 'Y':
			num(t.Year(), 4)
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			s := strconv.Itoa(t.Day())
			if len(s) < 2 && pad {
				s = " " + s
			}
			b.WriteString(s)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'B':
			b.WriteString(t.Month().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(d)
		}
	}
	return b.String()
}
