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

package timing

import (
	"fmt"
	"sort"
	"strings"
)

// Transport is the link a disaggregated request's KV cache crosses from the prefill engine to the
// decode engine. A transfer costs a fixed setup (connector handshake, descriptor preparation,
// completion notification) plus the bytes over the bandwidth. Each GPU of a tensor-parallel group
// moves its own shard over its own NIC or NVLink port, so the bandwidth is per GPU and the group
// transfers TP shards at once.
type Transport struct {
	Name string
	// BandwidthPerGPU is the achieved bytes per second of one GPU's link.
	BandwidthPerGPU float64
	// Latency is the fixed cost of one transfer, seconds.
	Latency float64
}

// Transports known to the simulator. Bandwidths are achieved, not line rate: about 80 % of a
// 400 Gb/s InfiniBand NDR port or a 200 Gb/s RoCE port per GPU (the usual H100 node has one NIC per
// GPU), NVLink 4 between GPUs of one node at about two thirds of its 450 GB/s per direction
// through NIXL, and a 25 GbE TCP path shared by the node. The fixed costs are the order of
// magnitude NIXL reports for small transfers; docs/disaggregation.md discusses both.
var transports = map[string]Transport{
	"nvlink": {Name: "nvlink", BandwidthPerGPU: 300e9, Latency: 0.5e-3},
	"rdma":   {Name: "rdma", BandwidthPerGPU: 40e9, Latency: 1e-3},
	"roce":   {Name: "roce", BandwidthPerGPU: 20e9, Latency: 1.5e-3},
	"tcp":    {Name: "tcp", BandwidthPerGPU: 2.5e9 / 8, Latency: 3e-3},
}

// TransportNames lists the known transports.
func TransportNames() []string {
	out := make([]string, 0, len(transports))
	for n := range transports {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// LookupTransport returns a transport by name (rdma also answers to infiniband and ib).
func LookupTransport(name string) (Transport, error) {
	switch strings.ToLower(name) {
	case "infiniband", "ib":
		name = "rdma"
	}
	t, ok := transports[strings.ToLower(name)]
	if !ok {
		return Transport{}, fmt.Errorf("unknown KV transport %q (known: %s)", name, strings.Join(TransportNames(), ", "))
	}
	return t, nil
}

// TransferTime is the seconds to move the KV cache of tokens prompt tokens of profile p over t.
// Zero tokens cost nothing: a decode engine that already holds the whole prompt pulls no block.
func (p Profile) TransferTime(tokens int, t Transport) float64 {
	if tokens <= 0 {
		return 0
	}
	bytes := p.KVBytesPerToken() * float64(tokens)
	return t.Latency + bytes/(t.BandwidthPerGPU*float64(max(1, p.TP)))
}
