package proxy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
)

// topLevel validates body as one JSON object and returns the raw bytes of each of its members'
// values, by unescaped key (the last one wins for a repeated key, as with encoding/json). The
// values are sub-slices of body, not copies.
//
// It is written by hand because it runs on every request over the whole body, and bodies carry
// prompts of hundreds of kilobytes: encoding/json validates and then decodes (two scans plus a
// copy of the prompt), which cost ~6 ms of CPU per 100K-token request, several tenths of a core
// at 100 requests/s. This single pass does only what the router needs: it checks the full JSON
// grammar (so malformed JSON is still a 400 here, not at the engine) and records spans; the
// small fields are then decoded from their spans with encoding/json. FuzzTopLevel checks it
// against encoding/json.
func topLevel(body []byte) (map[string][]byte, error) {
	p := &jsonScanner{b: body}
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return nil, p.errorf("request body must be a JSON object")
	}
	p.i++
	fields := make(map[string][]byte, 8)
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
	} else {
		for {
			p.ws()
			ks := p.i
			if err := p.str(); err != nil {
				return nil, err
			}
			key := p.b[ks+1 : p.i-1]
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, p.errorf("expected ':' after an object key")
			}
			p.i++
			p.ws()
			vs := p.i
			if err := p.value(1); err != nil {
				return nil, err
			}
			k := string(key)
			if bytes.IndexByte(key, '\\') >= 0 {
				// An escaped key names the same member as its plain spelling for every JSON
				// reader, the engine's included: {"mod\u0065l": ...} is the model. Rare, so
				// encoding/json may unescape it (the literal is valid: it cannot fail).
				_ = json.Unmarshal(p.b[ks:ks+len(key)+2], &k)
			}
			fields[k] = p.b[vs:p.i]
			p.ws()
			if p.i < len(p.b) && p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.b) && p.b[p.i] == '}' {
				p.i++
				break
			}
			return nil, p.errorf("expected ',' or '}' in object")
		}
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, p.errorf("unexpected data after the JSON object")
	}
	return fields, nil
}

type jsonScanner struct {
	b []byte
	i int
}

var errJSON = errors.New("invalid JSON")

func (p *jsonScanner) errorf(msg string) error {
	return fmt.Errorf("%w at offset %d: %s", errJSON, p.i, msg)
}

func (p *jsonScanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// maxDepth matches encoding/json's nesting limit.
const maxDepth = 10000

func (p *jsonScanner) value(depth int) error {
	if depth > maxDepth {
		return p.errorf("nesting too deep")
	}
	if p.i >= len(p.b) {
		return p.errorf("unexpected end of input")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		return p.str()
	case c == '{':
		p.i++
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return nil
		}
		for {
			p.ws()
			if err := p.str(); err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return p.errorf("expected ':' after an object key")
			}
			p.i++
			p.ws()
			if err := p.value(depth + 1); err != nil {
				return err
			}
			p.ws()
			if p.i < len(p.b) && p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.b) && p.b[p.i] == '}' {
				p.i++
				return nil
			}
			return p.errorf("expected ',' or '}' in object")
		}
	case c == '[':
		p.i++
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return nil
		}
		for {
			p.ws()
			if err := p.value(depth + 1); err != nil {
				return err
			}
			p.ws()
			if p.i < len(p.b) && p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.b) && p.b[p.i] == ']' {
				p.i++
				return nil
			}
			return p.errorf("expected ',' or ']' in array")
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return p.errorf("unexpected character")
}

func (p *jsonScanner) literal(lit string) error {
	if len(p.b)-p.i < len(lit) || string(p.b[p.i:p.i+len(lit)]) != lit {
		return p.errorf("invalid literal")
	}
	p.i += len(lit)
	return nil
}

func (p *jsonScanner) digits() int {
	n := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

func (p *jsonScanner) number() error {
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case p.digits() == 0:
		return p.errorf("invalid number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return p.errorf("invalid number")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return p.errorf("invalid number")
		}
	}
	return nil
}

// str scans a string, starting at its opening quote.
func (p *jsonScanner) str() error {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return p.errorf("expected a string")
	}
	p.i++
	for p.i < len(p.b) {
		// Prompts are long runs of plain characters: skip them 8 bytes at a time.
		p.i = plainRun(p.b, p.i)
		if p.i >= len(p.b) {
			break
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return nil
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return p.errorf("unterminated escape")
			}
			switch p.b[p.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i += 2
			case 'u':
				if p.i+6 > len(p.b) {
					return p.errorf("short \\u escape")
				}
				for _, h := range p.b[p.i+2 : p.i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return p.errorf("invalid \\u escape")
					}
				}
				p.i += 6
			default:
				return p.errorf("invalid escape")
			}
		case c < 0x20:
			return p.errorf("control character in string")
		default:
			p.i++
		}
	}
	return p.errorf("unterminated string")
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainRun returns the index of the first byte at or after i that ends a run of plain string
// content: a quote, a backslash or a control character (or len(b)). It tests 8 bytes per step
// with word arithmetic (a byte-at-a-time loop cost ~2 ns per byte, ~1 ms per 100K-token prompt).
// The zero-byte tests can flag bytes after a true match (borrows), never before one, so the
// first flagged byte is exact.
func plainRun(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^('"'*lsb), x^('\\'*lsb)
		m := ((x-0x20*lsb) & ^x | (q-lsb) & ^q | (bs-lsb) & ^bs) & msb
		if m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}
