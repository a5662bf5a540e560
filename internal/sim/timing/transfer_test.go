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
	"math"
	"testing"
)

func TestTransferTimeIsLatencyPlusBytesOverTheGroupsLinks(t *testing.T) {
	p, err := Lookup("h100-llama-3.1-8b-tp1")
	if err != nil {
		t.Fatal(err)
	}
	rdma, err := LookupTransport("rdma")
	if err != nil {
		t.Fatal(err)
	}
	// Llama-3.1-8B: 32 layers, 8 KV heads of 128, K and V in BF16 = 128 KiB per token.
	if got := p.KVBytesPerToken(); got != 131072 {
		t.Fatalf("KV bytes per token = %v, want 131072", got)
	}
	want := rdma.Latency + 8192*131072/rdma.BandwidthPerGPU
	if got := p.TransferTime(8192, rdma); math.Abs(got-want) > 1e-12 {
		t.Fatalf("8K tokens over rdma: %v s, want %v", got, want)
	}
	if got := p.TransferTime(0, rdma); got != 0 {
		t.Fatalf("nothing to pull costs %v s, want 0", got)
	}
	// A tensor-parallel group moves its shards over one link per GPU at once.
	tp2 := p
	tp2.TP = 2
	if a, b := p.TransferTime(8192, rdma)-rdma.Latency, tp2.TransferTime(8192, rdma)-rdma.Latency; math.Abs(a-2*b) > 1e-12 {
		t.Fatalf("TP2 moves the same bytes in %v s, TP1 in %v s: want half", b, a)
	}
	tcp, _ := LookupTransport("tcp")
	nv, _ := LookupTransport("nvlink")
	if !(nv.BandwidthPerGPU > rdma.BandwidthPerGPU && rdma.BandwidthPerGPU > tcp.BandwidthPerGPU) {
		t.Fatal("transports out of order: nvlink > rdma > tcp expected")
	}
}

func TestLookupTransportNamesAndErrors(t *testing.T) {
	for _, n := range []string{"ib", "InfiniBand", "RDMA"} {
		if tr, err := LookupTransport(n); err != nil || tr.Name != "rdma" {
			t.Errorf("%q: %v, %v", n, tr.Name, err)
		}
	}
	if _, err := LookupTransport("carrier-pigeon"); err == nil {
		t.Fatal("an unknown transport was accepted")
	}
}
