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

package policy

// hashString is FNV-1a 64; it only has to spread session keys, not resist attackers (a client
// choosing its session key can only choose its own endpoint among ties).
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// rendezvous is the highest-random-weight score of (key, endpoint): stable across processes, so
// every router replica breaks the same tie the same way, and only the keys of a removed endpoint
// move when the fleet changes.
func rendezvous(key uint64, endpoint string) uint64 {
	return mix64(key ^ hashString(endpoint))
}

// mix64 is the splitmix64 finaliser.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
