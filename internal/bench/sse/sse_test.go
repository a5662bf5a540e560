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

package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(t testing.TB, r io.Reader, max int) ([]Event, error) {
	t.Helper()
	sr := NewReader(r, max)
	var out []Event
	for {
		ev, err := sr.Next()
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		out = append(out, ev)
	}
}

func TestEventStreamRules(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []Event
	}{
		{"data with and without the space", "data: a\n\ndata:b\n\ndata:  c\n\n",
			[]Event{{"message", "a", "", -1}, {"message", "b", "", -1}, {"message", " c", "", -1}}},
		{"multi-line data joined with LF", "data: one\ndata: two\ndata\n\n",
			[]Event{{"message", "one\ntwo\n", "", -1}}},
		{"comments are skipped", ": ping\n:\ndata: x\n: more\n\n", []Event{{"message", "x", "", -1}}},
		{"event id and retry", "event: error\nid: 7\nretry: 1500\ndata: boom\n\ndata: next\n\n",
			[]Event{{"error", "boom", "7", 1500}, {"message", "next", "7", 1500}}},
		{"retry that is not digits is ignored", "retry: 1.5\ndata: x\n\n", []Event{{"message", "x", "", -1}}},
		{"id with NUL is ignored", "id: a\x00b\ndata: x\n\n", []Event{{"message", "x", "", -1}}},
		{"CR line endings", "data: a\r\rdata: b\r\r", []Event{{"message", "a", "", -1}, {"message", "b", "", -1}}},
		{"CRLF line endings", "data: a\r\ndata: b\r\n\r\n", []Event{{"message", "a\nb", "", -1}}},
		{"mixed endings", "data: a\r\n\ndata: b\n\r", []Event{{"message", "a", "", -1}, {"message", "b", "", -1}}},
		{"final event without blank line is dropped", "data: a\n\ndata: b\n", []Event{{"message", "a", "", -1}}},
		{"partial last line is dropped", "data: a\n\ndata: b", []Event{{"message", "a", "", -1}}},
		{"event without data is not dispatched", "event: ping\n\ndata: x\n\n", []Event{{"message", "x", "", -1}}},
		{"empty data line dispatches an empty event", "data\n\n", []Event{{"message", "", "", -1}}},
		{"unknown fields are ignored", "foo: bar\ndata: x\n\n", []Event{{"message", "x", "", -1}}},
		{"byte order mark is skipped", "\xEF\xBB\xBFdata: x\n\n", []Event{{"message", "x", "", -1}}},
		{"field name is case sensitive", "Data: x\n\ndata: y\n\n", []Event{{"message", "y", "", -1}}},
		{"colon in value kept", "data: {\"a\":1}\n\n", []Event{{"message", `{"a":1}`, "", -1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, split := range []bool{false, true} {
				var r io.Reader = strings.NewReader(c.in)
				if split {
					r = iotest.OneByteReader(r)
				}
				got, err := readAll(t, r, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !equal(got, c.want) {
					t.Fatalf("split=%v: got %+v, want %+v", split, got, c.want)
				}
			}
		})
	}
}

func equal(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLongLineIsAnError(t *testing.T) {
	in := "data: " + strings.Repeat("x", 100) + "\n\n"
	_, err := readAll(t, strings.NewReader(in), 64)
	if !errors.Is(err, ErrTooLong) || !strings.Contains(err.Error(), "64 bytes") {
		t.Fatalf("got %v, want ErrTooLong naming the limit", err)
	}
	// Many short data lines add up to an event over the limit too.
	in = strings.Repeat("data: 0123456789\n", 10) + "\n"
	if _, err := readAll(t, strings.NewReader(in), 64); !errors.Is(err, ErrTooLong) {
		t.Fatalf("got %v, want ErrTooLong for the event", err)
	}
	// Exactly at the limit is fine.
	in = "data:" + strings.Repeat("x", 59) + "\n\n"
	if evs, err := readAll(t, strings.NewReader(in), 64); err != nil || len(evs) != 1 {
		t.Fatalf("line of 64 bytes: %v %v", evs, err)
	}
}

func TestReadErrorIsReturned(t *testing.T) {
	boom := errors.New("connection reset")
	r := io.MultiReader(strings.NewReader("data: a\n\n"), iotest.ErrReader(boom))
	evs, err := readAll(t, r, 0)
	if len(evs) != 1 || !errors.Is(err, boom) {
		t.Fatalf("got %v %v", evs, err)
	}
}

// A CR-terminated blank line must dispatch without waiting for the next byte (which, on a live
// stream, may be seconds away).
func TestCRDispatchesWithoutLookahead(t *testing.T) {
	pr, pw := io.Pipe()
	sr := NewReader(pr, 0)
	go func() { _, _ = pw.Write([]byte("data: a\r\r")) }()
	ev, err := sr.Next()
	if err != nil || ev.Data != "a" {
		t.Fatalf("got %+v %v", ev, err)
	}
	pw.Close()
}

// encode writes events the way a server would, with the given line ending.
func encode(evs []Event, eol string) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type != "message" {
			b.WriteString("event: " + e.Type + eol)
		}
		for _, l := range strings.Split(e.Data, "\n") {
			b.WriteString("data: " + l + eol)
		}
		b.WriteString(eol)
	}
	return b.String()
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("data: a\n\ndata:b\r\n\r\n: c\rid: 1\rretry: 10\revent: e\rdata\r\r"), uint8(3))
	f.Add([]byte("\xEF\xBB\xBFdata: {\"x\":1}\n\ndata: [DONE]\n\n"), uint8(1))
	f.Add([]byte("data: x\r"), uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		const max = 256
		whole, errWhole := readAll(t, bytes.NewReader(in), max)
		// The same bytes delivered in small reads give the same events: the parser holds no
		// state that depends on where the network cut the stream.
		size := int(chunk%16) + 1
		pieces, errPieces := readAll(t, &chunked{b: in, n: size}, max)
		if !equal(whole, pieces) || (errWhole == nil) != (errPieces == nil) {
			t.Fatalf("whole %+v (%v) != chunked by %d %+v (%v)", whole, errWhole, size, pieces, errPieces)
		}
		for _, e := range whole {
			if len(e.Data) > max || strings.ContainsAny(e.Type, "\r\n") || strings.ContainsRune(e.ID, 0) {
				t.Fatalf("bad event %+v", e)
			}
		}
		// Round trip: what we parsed, written back out, parses to the same events.
		if errWhole == nil {
			var ok []Event
			for _, e := range whole {
				if !strings.ContainsAny(e.Data, "\r") && !strings.ContainsAny(e.Type, "\r\n:") && e.Type != "" {
					ok = append(ok, Event{Type: e.Type, Data: e.Data, Retry: -1})
				}
			}
			for _, eol := range []string{"\n", "\r", "\r\n"} {
				back, err := readAll(t, strings.NewReader(encode(ok, eol)), 1<<20)
				if err != nil || !equal(back, ok) {
					t.Fatalf("round trip with %q: %+v (%v), want %+v", eol, back, err, ok)
				}
			}
		}
	})
}

type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(c.n, len(p), len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}
