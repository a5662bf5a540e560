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
	"math"
	"testing"
)

// A poison limit is forwarded (the engine answers it with a 400), but the work the router adds
// up for it must stay a positive, bounded number: prompt + limit must not wrap.
func TestMaxTokensIsBoundedForAccounting(t *testing.T) {
	huge, neg, small := math.MaxInt, -1, 64
	cases := []struct {
		name string
		req  inference
		want int
	}{
		{"none", inference{}, 0},
		{"max_tokens", inference{MaxTokens: &small}, 64},
		{"max_completion_tokens wins", inference{MaxTokens: &huge, MaxCompletionTokens: &small}, 64},
		{"2^63-1", inference{MaxTokens: &huge}, maxCountedTokens},
		{"negative passes through (the exchange prices the default)", inference{MaxTokens: &neg}, -1},
	}
	for _, tc := range cases {
		got := tc.req.maxTokens()
		if got != tc.want {
			t.Errorf("%s: maxTokens() = %d, want %d", tc.name, got, tc.want)
		}
		if work := 1_000_000 + got; work < 0 {
			t.Errorf("%s: prompt + limit wrapped to %d", tc.name, work)
		}
	}
}
