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

package proxy

import (
	"github.com/kvrouter/kvrouter/internal/router/jsonscan"
)

// topLevel validates body as one JSON object and returns the raw bytes of each of its members'
// values, by unescaped key (the last one wins for a repeated key, as with encoding/json). The
// values are sub-slices of body, not copies.
//
// It scans by hand (jsonscan) because it runs on every request over the whole body, and bodies
// carry prompts of hundreds of kilobytes: encoding/json validates and then decodes (two scans
// plus a copy of the prompt), which cost ~6 ms of CPU per 100K-token request, several tenths of
// a core at 100 requests/s. This single pass does only what the router needs: it checks the
// full JSON grammar (so malformed JSON is still a 400 here, not at the engine) and records
// spans; the small fields are then decoded from their spans with encoding/json. FuzzTopLevel
// checks it against encoding/json.
func topLevel(body []byte) (map[string][]byte, error) {
	s := jsonscan.New(body)
	if s.Peek() != '{' {
		return nil, s.Errorf("request body must be a JSON object")
	}
	fields := make(map[string][]byte, 8)
	err := s.Object(func(name jsonscan.String) error {
		v, err := s.Skip()
		if err != nil {
			return err
		}
		// An escaped key names the same member as its plain spelling for every JSON reader,
		// the engine's included: {"mod\u0065l": ...} is the model.
		var buf [32]byte
		fields[string(name.Text(buf[:0]))] = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !s.AtEnd() {
		return nil, s.Errorf("unexpected data after the JSON object")
	}
	return fields, nil
}
