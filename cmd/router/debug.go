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

package main

import (
	"encoding/json"
	"net/http"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvstream"
)

// indexDump is GET /debug/kvindex on the debug listener (--pprof-addr): what the index holds per
// event source, by the engines' own block hashes, so a test (or an operator) can compare it with
// what each engine reports holding. Hashes name blocks; they carry no prompt text or token ids.
type indexDump struct {
	// Streams is every subscriber's state with the GPU block hashes the index holds for it.
	Streams []streamDump `json:"streams"`
	// Sources is every source the index keeps an id for; one whose endpoint is gone is a leak.
	Sources []sourceDump `json:"sources"`
}

type streamDump struct {
	kvstream.SourceStatus
	GPUHashes []uint64 `json:"gpuHashes"`
}

type sourceDump struct {
	Endpoint  string `json:"endpoint"`
	Rank      int    `json:"rank"`
	GPUBlocks int    `json:"gpuBlocks"`
}

func debugIndexHandler(index *kvindex.Index, streams *kvstream.Manager) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		var d indexDump
		for _, st := range streams.Status() {
			d.Streams = append(d.Streams, streamDump{SourceStatus: st,
				GPUHashes: index.SourceHashes(st.Source, kvevents.MediumGPU)})
		}
		for _, src := range index.Sources() {
			d.Sources = append(d.Sources, sourceDump{Endpoint: src.Endpoint, Rank: src.Rank,
				GPUBlocks: len(index.SourceHashes(src, kvevents.MediumGPU))})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d)
	}
}
