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

package queue

import (
	"slices"
	"testing"
)

func drain(q *Queue[int]) []int {
	var out []int
	for {
		v, ok := q.Pop()
		if !ok {
			return out
		}
		out = append(out, v)
	}
}

func TestFIFOAndBound(t *testing.T) {
	q := New[int](Config{Capacity: 3})
	for i := range 3 {
		if !q.Push(i, float64(i)) {
			t.Fatalf("push %d refused below capacity", i)
		}
	}
	if q.Push(9, 4) {
		t.Fatal("push beyond capacity accepted")
	}
	if v, at, ok := q.Head(); !ok || v != 0 || at != 0 {
		t.Fatalf("head = %v %v %v, want 0 at 0", v, at, ok)
	}
	if got := drain(q); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("order %v", got)
	}
	if _, ok := q.Pop(); ok {
		t.Fatal("pop from empty queue")
	}
}

func TestZeroCapacityQueuesNothing(t *testing.T) {
	if New[int](Config{}).Push(1, 0) {
		t.Fatal("a queue with no capacity accepted a request")
	}
}

func TestExpireTakesOnlyTheOverdueFront(t *testing.T) {
	q := New[int](Config{Capacity: 10, MaxWait: 2})
	q.Push(1, 0)
	q.Push(2, 1)
	q.Push(3, 5)
	if got := q.Expire(3.5); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("expired %v, want [1 2]", got)
	}
	if q.Len() != 1 {
		t.Fatalf("len %d after expiry", q.Len())
	}
	if got := New[int](Config{Capacity: 1}).Expire(1e9); got != nil {
		t.Fatalf("no MaxWait expired %v", got)
	}
}

func TestRemoveKeepsOrder(t *testing.T) {
	q := New[int](Config{Capacity: 10})
	for i := range 5 {
		q.Push(i, 0)
	}
	q.Pop()
	if !q.Remove(func(v int) bool { return v == 2 }) {
		t.Fatal("remove missed a queued request")
	}
	if q.Remove(func(v int) bool { return v == 7 }) {
		t.Fatal("remove found a request never queued")
	}
	if got := drain(q); !slices.Equal(got, []int{1, 3, 4}) {
		t.Fatalf("order after remove %v", got)
	}
}

// A queue that is never empty for long reuses its slice instead of growing with every push.
func TestSteadyStateDoesNotGrow(t *testing.T) {
	q := New[int](Config{Capacity: 4})
	for i := range 10000 {
		q.Push(i, 0)
		if q.Len() > 2 {
			q.Pop()
		}
	}
	if c := cap(q.items); c > 64 {
		t.Fatalf("backing slice grew to %d for a queue of at most 3", c)
	}
}
