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

package kvindex

// RequestKeys appends to dst the content keys of the full blocks of tokens (a trailing partial
// block has no key: engines only cache full blocks) and returns it. Lookup and Predict compute
// these themselves; call it when you need the keys, or to reuse them across calls.
func RequestKeys(dst []Key, tokens []uint32, blockSize int, p KeyParams) []Key {
	if blockSize <= 0 {
		return dst
	}
	h := newChain(p.LoRAName)
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		var extra uint64
		if i == 0 && p.CacheSalt != "" {
			extra = saltDigest(p.CacheSalt)
		}
		dst = append(dst, h.next(tokens[i:i+blockSize], extra))
	}
	return dst
}
