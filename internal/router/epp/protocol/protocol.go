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

// Package protocol holds the names and the message helpers of the Gateway API Inference
// Extension's endpoint picker protocol over Envoy ext_proc: what the picker (package epp) and
// whatever drives it (epptest, kvbench's stand-in gateway) must agree on, without the router
// that the picker brings along.
package protocol

import (
	"net/http"
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The names of the Gateway API Inference Extension's endpoint picker protocol (v1), where the
// gateway and the picker read and write them.
const (
	// SubsetNamespace and SubsetKey: the request's filter metadata that lists the addresses the
	// picker may choose from (a list of "ip:port", or one comma-separated string).
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
	// DestinationNamespace and DestinationKey: the picker's answer, as a request header and as
	// dynamic metadata alike: "ip:port[,ip:port...]", best first.
	DestinationNamespace = "envoy.lb"
	DestinationKey       = "x-gateway-destination-endpoint"
	// ServedKey (in DestinationNamespace): the response's filter metadata naming the address
	// that served the request.
	ServedKey = "x-gateway-destination-endpoint-served"
)

// The gRPC health services the picker answers.
const (
	// LivenessService is SERVING while the process runs.
	LivenessService = "liveness"
	// ReadinessService is SERVING while the router takes traffic (proxy.Server.Ready): an engine
	// is ready and, at start, the index has replayed the engines' events.
	ReadinessService = "readiness"
	// ExtProcService follows ReadinessService.
	ExtProcService = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// BodyChunkBytes bounds the body chunks the picker streams back to the gateway: some Envoy
// builds refuse a streamed chunk over 64 KiB, so this leaves a margin.
const BodyChunkBytes = 62000

// HeaderValue is a header's value as Envoy sends it: raw bytes in recent versions, the string
// field in older ones.
func HeaderValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// SplitHeaders splits Envoy's header map into its pseudo-headers (":method", ":path",
// ":status"...) and the others, canonicalized as net/http keys them.
func SplitHeaders(m *corev3.HeaderMap) (pseudo map[string]string, header http.Header) {
	pseudo, header = map[string]string{}, http.Header{}
	for _, h := range m.GetHeaders() {
		if strings.HasPrefix(h.GetKey(), ":") {
			pseudo[h.GetKey()] = HeaderValue(h)
			continue
		}
		header.Add(h.GetKey(), HeaderValue(h))
	}
	return pseudo, header
}

// SetHeaders is a header mutation that sets every header of h (its first value), overwriting
// what the request carries: a client must not be able to add its own destination to the
// router's. Keys are lowercased, as Envoy's header maps hold them. The order is the keys'.
func SetHeaders(h http.Header) []*corev3.HeaderValueOption {
	keys := make([]string, 0, len(h))
	for k, v := range h {
		if len(v) > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]*corev3.HeaderValueOption, 0, len(keys))
	for _, k := range keys {
		out = append(out, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(h[k][0])},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	return out
}

// Subset reads the subset hint from a request's metadata: nil when the gateway set none, else
// the addresses (possibly none). Both encodings gateways use are read: a list of strings, and a
// comma-separated string (what a header copied into metadata gives).
func Subset(req *extprocv3.ProcessingRequest) []string {
	ns := req.GetMetadataContext().GetFilterMetadata()[SubsetNamespace]
	v, ok := ns.GetFields()[SubsetKey]
	if !ok {
		return nil
	}
	out := []string{}
	add := func(s string) {
		for _, a := range strings.Split(s, ",") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, a)
			}
		}
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		add(k.StringValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			add(e.GetStringValue())
		}
	}
	return out
}

// Served reads the address that served the request from a response's metadata ("" when the
// gateway did not say).
func Served(req *extprocv3.ProcessingRequest) string {
	ns := req.GetMetadataContext().GetFilterMetadata()[DestinationNamespace]
	return strings.TrimSpace(ns.GetFields()[ServedKey].GetStringValue())
}

// DestinationMetadata is the dynamic metadata of a decision.
func DestinationMetadata(destinations string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		DestinationNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationKey: structpb.NewStringValue(destinations),
		}}),
	}}
}
