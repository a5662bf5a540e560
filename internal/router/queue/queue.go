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

// Package queue is the router's bounded queue: requests that no engine is expected to start soon
// wait here, not in an engine's queue, so that each goes to whichever engine frees first (with
// its cache affinity judged again at that moment) instead of being committed at arrival to an
// engine that may turn out to be the slowest to drain. The bound is what keeps overload from
// becoming unbounded latency: a request that cannot wait (the queue is full, or it waited its
// MaxWait) is turned away with a fast 429 the client can retry elsewhere.
//
// The package is pure: no clock (callers pass the time, in seconds on any monotonic scale), no
// goroutines, no I/O. It is shared by the proxy and by kvbench's simulation of the same policy.
// A Queue is not safe for concurrent use; the proxy guards it with its own lock.
package queue

// DefaultMaxWait (seconds) is the router's default --queue-max-wait, which the simulated router
// queue uses too: within the default admission TTFT budget (10 s × 0.7 tail headroom), with as
// much again left for the engine to start the request once released.
const DefaultMaxWait = 3.0

// Config bounds a Queue.
type Config struct {
	// Capacity is the most requests waiting at once; a push beyond it is refused. <= 0 means
	// the queue holds nothing (every push is refused): queueing off.
	Capacity int
	// MaxWait (seconds) is the longest a request waits before it is expired (shed). <= 0: no
	// limit.
	MaxWait float64
}

// Queue is a bounded FIFO of T with arrival times.
type Queue[T any] struct {
	cfg   Config
	items []entry[T]
	head  int
}

type entry[T any] struct {
	v  T
	at float64
}

// New returns an empty queue.
func New[T any](cfg Config) *Queue[T] { return &Queue[T]{cfg: cfg} }

// Config returns the queue's bounds.
func (q *Queue[T]) Config() Config { return q.cfg }

// Len is the number of requests waiting.
func (q *Queue[T]) Len() int { return len(q.items) - q.head }

// Push appends v, arrived at now. It reports false, leaving the queue as it was, when the queue
// is full (or queueing is off).
func (q *Queue[T]) Push(v T, now float64) bool {
	if q.Len() >= q.cfg.Capacity {
		return false
	}
	if q.head > 0 && q.head*2 >= len(q.items) {
		// Reuse the consumed front once it is half the slice, so a queue that never empties
		// does not grow without bound.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, entry[T]{v: v, at: now})
	return true
}

// Head returns the oldest request and when it arrived, without removing it.
func (q *Queue[T]) Head() (v T, at float64, ok bool) {
	if q.Len() == 0 {
		return v, 0, false
	}
	e := q.items[q.head]
	return e.v, e.at, true
}

// Pop removes and returns the oldest request.
func (q *Queue[T]) Pop() (v T, ok bool) {
	if q.Len() == 0 {
		return v, false
	}
	e := q.items[q.head]
	var zero entry[T]
	q.items[q.head] = zero
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return e.v, true
}

// Expire removes and returns, oldest first, the requests that have waited longer than MaxWait
// at now. Being FIFO, they are all at the front.
func (q *Queue[T]) Expire(now float64) []T {
	if q.cfg.MaxWait <= 0 {
		return nil
	}
	var out []T
	for q.Len() > 0 && now-q.items[q.head].at > q.cfg.MaxWait {
		v, _ := q.Pop()
		out = append(out, v)
	}
	return out
}

// Remove drops the first request for which match is true (a client that went away while
// waiting) and reports whether it found one.
func (q *Queue[T]) Remove(match func(T) bool) bool {
	for i := q.head; i < len(q.items); i++ {
		if match(q.items[i].v) {
			copy(q.items[i:], q.items[i+1:])
			var zero entry[T]
			q.items[len(q.items)-1] = zero
			q.items = q.items[:len(q.items)-1]
			if q.head == len(q.items) {
				q.items, q.head = q.items[:0], 0
			}
			return true
		}
	}
	return false
}
