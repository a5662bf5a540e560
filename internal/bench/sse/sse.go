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

// Package sse reads a Server-Sent Events stream by the WHATWG HTML "event stream" rules (the
// interpretation part of the EventSource specification): lines end in CR, LF or CRLF; a line
// starting with ":" is a comment; "field: value" loses at most one space after the colon; data
// lines accumulate joined by "\n"; an empty line dispatches the event; an event still pending when
// the stream ends is dropped. Lines and events are bounded so that a misbehaving server cannot
// make the reader buffer without limit.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// DefaultMaxBytes bounds one line and one event's data when NewReader is given 0. vLLM's chunks
// are well under a kilobyte; 4 MiB leaves room for logprobs and prompt token ids.
const DefaultMaxBytes = 4 << 20

// ErrTooLong is returned (wrapped, with the limit) for a line or an event over the bound.
var ErrTooLong = errors.New("sse: line or event too long")

// Event is one dispatched event.
type Event struct {
	// Type is the "event:" field; "message" when the event set none.
	Type string
	// Data is the "data:" lines joined with "\n".
	Data string
	// ID is the last event ID in force when the event was dispatched (it persists across events).
	ID string
	// Retry is the reconnection time in milliseconds set by the last valid "retry:" field of the
	// stream so far; -1 when none was given.
	Retry int
}

// Reader reads events from a stream.
type Reader struct {
	br      *bufio.Reader
	max     int
	line    []byte
	skipLF  bool // the previous line ended in CR: a following LF belongs to it
	started bool // the optional byte order mark has been checked
	lastID  string
	retry   int
	data    bytes.Buffer
	typ     string
	hasData bool
}

// NewReader reads events from r; maxBytes bounds a line and an event's data (0: DefaultMaxBytes).
func NewReader(r io.Reader, maxBytes int) *Reader {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), max: maxBytes, retry: -1}
}

// Next returns the next event. At the end of the stream it returns io.EOF, dropping an event that
// was not terminated by an empty line, as the specification requires. Read errors other than EOF
// are returned as they are; a line or event over the bound returns an error wrapping ErrTooLong.
func (r *Reader) Next() (Event, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			return Event{}, err
		}
		if len(line) == 0 {
			if ev, ok := r.dispatch(); ok {
				return ev, nil
			}
			continue
		}
		if err := r.field(line); err != nil {
			return Event{}, err
		}
	}
}

// dispatch ends the pending event; an event without data is discarded (the specification's
// "if the data buffer is an empty string" step), which is what makes a lone "event:" a no-op.
func (r *Reader) dispatch() (Event, bool) {
	defer func() { r.data.Reset(); r.typ = ""; r.hasData = false }()
	if !r.hasData {
		return Event{}, false
	}
	d := r.data.Bytes()
	d = bytes.TrimSuffix(d, []byte{'\n'})
	typ := r.typ
	if typ == "" {
		typ = "message"
	}
	return Event{Type: typ, Data: string(d), ID: r.lastID, Retry: r.retry}, true
}

func (r *Reader) field(line []byte) error {
	if line[0] == ':' {
		return nil
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		value = bytes.TrimPrefix(value, []byte{' '})
	}
	switch string(name) {
	case "data":
		if r.data.Len()+len(value)+1 > r.max {
			return fmt.Errorf("%w: event data over %d bytes", ErrTooLong, r.max)
		}
		r.data.Write(value)
		r.data.WriteByte('\n')
		r.hasData = true
	case "event":
		r.typ = string(value)
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			r.lastID = string(value)
		}
	case "retry":
		if isDigits(value) {
			if n, err := strconv.Atoi(string(value)); err == nil {
				r.retry = n
			}
		}
	}
	// Unknown fields are ignored, as the specification says.
	return nil
}

func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// readLine returns the next line without its terminator. A CR is a complete terminator by
// itself: the LF of a CRLF pair is skipped at the start of the next line instead of peeked for
// here, so that a stream ending its lines in CR alone dispatches without waiting for more bytes.
func (r *Reader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	if r.skipLF {
		r.skipLF = false
		b, err := r.br.ReadByte()
		if err != nil {
			return nil, err
		}
		if b != '\n' {
			_ = r.br.UnreadByte()
		}
	}
	if !r.started {
		r.started = true
		// Peek one byte first: a stream that opens with a short comment and then waits must
		// not block here on bytes that are not coming yet.
		if b, err := r.br.Peek(1); err == nil && b[0] == 0xEF {
			if bom, err := r.br.Peek(3); err == nil && bytes.Equal(bom, []byte("\xEF\xBB\xBF")) {
				_, _ = r.br.Discard(3)
			}
		}
	}
	for {
		n := r.br.Buffered()
		if n == 0 {
			if _, err := r.br.Peek(1); err != nil {
				// A partial line at the end of the stream is not a line: drop it.
				return nil, err
			}
			n = r.br.Buffered()
		}
		chunk, _ := r.br.Peek(n)
		i := bytes.IndexAny(chunk, "\r\n")
		end := i
		if i < 0 {
			end = len(chunk)
		}
		if len(r.line)+end > r.max {
			return nil, fmt.Errorf("%w: line over %d bytes", ErrTooLong, r.max)
		}
		r.line = append(r.line, chunk[:end]...)
		if i < 0 {
			_, _ = r.br.Discard(n)
			continue
		}
		r.skipLF = chunk[i] == '\r'
		_, _ = r.br.Discard(i + 1)
		return r.line, nil
	}
}
