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

package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KVTransferConfig is the part of vLLM's --kv-transfer-config the simulator reads; other fields
// (kv_connector_extra_config, kv_buffer_device, ...) are accepted and ignored.
type KVTransferConfig struct {
	Connector string `json:"kv_connector"`
	Role      string `json:"kv_role"`
	// EngineID fixes the engine id a prefill response advertises; empty: a random id per engine
	// start, as vLLM draws one.
	EngineID string `json:"engine_id"`
	// LoadFailurePolicy is vLLM's kv_load_failure_policy: "fail" (vLLM's default, and so
	// vllm-sim's) fails the request when a pull fails, "recompute" recomputes the prompt
	// locally. The operator renders "recompute": a failed pull then loses nothing.
	LoadFailurePolicy string `json:"kv_load_failure_policy"`
}

// Connectors the simulator plays: NixlConnector's kv_transfer_params protocol under vLLM's
// disaggregation proxy (the decode engine pulls the prefill engine's blocks).
var kvConnectors = []string{"NixlConnector"}

// lmcacheConnector is refused by name: it is a real vLLM connector, but its disaggregated
// prefill is a push to a decode engine named in the prefill request, which vllm-sim does not
// play; accepting it with NIXL's pull protocol would simulate something LMCache does not do.
const lmcacheConnector = "LMCacheConnectorV1"

// KV roles: kv_both serves whole requests and either leg; a producer only prefill legs, a
// consumer only decode legs.
const (
	roleBoth     = "kv_both"
	roleProducer = "kv_producer"
	roleConsumer = "kv_consumer"
)

const (
	defaultSideChannelPort = 5600
	defaultKVTimeout       = 480 * time.Second
	// defaultLoadFailurePolicy is vLLM's (KVTransferConfig.kv_load_failure_policy).
	defaultLoadFailurePolicy = "fail"
)

func (s *Settings) parseKVTransfer(raw string) error {
	if raw == "" {
		return nil
	}
	c := &KVTransferConfig{}
	s.KVTransfer = c
	if err := json.Unmarshal([]byte(raw), c); err != nil {
		return fmt.Errorf("--kv-transfer-config: %w", err)
	}
	var errs []error
	known := false
	for _, k := range kvConnectors {
		known = known || c.Connector == k
	}
	switch {
	case c.Connector == "":
		errs = append(errs, errors.New("--kv-transfer-config: kv_connector is required"))
	case c.Connector == lmcacheConnector:
		errs = append(errs, fmt.Errorf("--kv-transfer-config: kv_connector %q is not simulated: LMCache's disaggregated prefill pushes "+
			"the KV to a decode engine named in the prefill request, which vllm-sim does not play (it plays NixlConnector's pull)", c.Connector))
	case !known:
		errs = append(errs, fmt.Errorf("--kv-transfer-config: kv_connector %q is not simulated (vllm-sim plays %s)", c.Connector, strings.Join(kvConnectors, " and ")))
	}
	switch c.Role {
	case roleBoth, roleProducer, roleConsumer:
	case "":
		errs = append(errs, errors.New("--kv-transfer-config: kv_role is required with kv_connector (kv_both, kv_producer or kv_consumer)"))
	default:
		errs = append(errs, fmt.Errorf("--kv-transfer-config: kv_role %q is not one of kv_both, kv_producer, kv_consumer", c.Role))
	}
	switch c.LoadFailurePolicy {
	case "":
		c.LoadFailurePolicy = defaultLoadFailurePolicy
	case "recompute", "fail":
	default:
		errs = append(errs, fmt.Errorf("--kv-transfer-config: kv_load_failure_policy %q is not recompute or fail", c.LoadFailurePolicy))
	}
	return errors.Join(errs...)
}

// resolveKVTransfer reads the side-channel environment as vLLM's NIXL connector does.
func (s *Settings) resolveKVTransfer(lookupEnv func(string) (string, bool)) []error {
	var errs []error
	if s.KVTransferTimeout == 0 {
		s.KVTransferTimeout = defaultKVTimeout
		if v, ok := lookupEnv("VLLM_NIXL_ABORT_REQUEST_TIMEOUT"); ok && v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				errs = append(errs, fmt.Errorf("VLLM_NIXL_ABORT_REQUEST_TIMEOUT: %q is not a positive number of seconds", v))
			} else {
				s.KVTransferTimeout = time.Duration(n) * time.Second
			}
		}
	} else if s.KVTransferTimeout < 0 {
		errs = append(errs, errors.New("--kv-transfer-timeout must be positive"))
	}
	if s.KVTransfer == nil {
		return errs
	}
	s.SideChannelHost, _ = lookupEnv("VLLM_NIXL_SIDE_CHANNEL_HOST")
	if s.SideChannelHost == "" {
		s.SideChannelHost = s.Host
		if s.Host == "" || s.Host == "0.0.0.0" || s.Host == "::" {
			s.SideChannelHost = "localhost"
		}
	}
	s.SideChannelPort = defaultSideChannelPort
	if v, ok := lookupEnv("VLLM_NIXL_SIDE_CHANNEL_PORT"); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("VLLM_NIXL_SIDE_CHANNEL_PORT: %q is not a port", v))
		}
		s.SideChannelPort = n
	}
	return errs
}

// kvParams are a request's kv_transfer_params, checked.
type kvParams struct {
	remoteDecode  bool // prefill leg: hold the KV for a remote decode engine
	remotePrefill bool // decode leg: pull the KV from the remote prefill engine
	engineID      string
	blockIDs      []int
	host          string
	port          int
	requestID     string
}

// parseKVParams reads kv_transfer_params; nil when absent or null. Every bad field is a 400
// naming it. Keys the simulator does not use (other connectors' fields) are ignored.
func parseKVParams(raw json.RawMessage) (*kvParams, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	bad := func(field, format string, a ...any) error {
		return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", param: "kv_transfer_params" + field,
			msg: "kv_transfer_params" + field + ": " + fmt.Sprintf(format, a...)}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, bad("", "must be an object")
	}
	isNull := func(k string) bool { v, ok := m[k]; return !ok || string(v) == "null" }
	p := &kvParams{}
	for _, f := range []struct {
		key string
		dst *bool
	}{{"do_remote_decode", &p.remoteDecode}, {"do_remote_prefill", &p.remotePrefill}} {
		if !isNull(f.key) && json.Unmarshal(m[f.key], f.dst) != nil {
			return nil, bad("."+f.key, "must be a boolean")
		}
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"remote_engine_id", &p.engineID}, {"remote_host", &p.host}, {"remote_request_id", &p.requestID}} {
		if !isNull(f.key) && json.Unmarshal(m[f.key], f.dst) != nil {
			return nil, bad("."+f.key, "must be a string")
		}
	}
	if !isNull("remote_port") {
		if err := strictInt(m["remote_port"], &p.port); err != nil || p.port < 1 || p.port > 65535 {
			return nil, bad(".remote_port", "must be a port number (1-65535), got %.40s", m["remote_port"])
		}
	}
	if !isNull("remote_block_ids") {
		var ids []json.RawMessage
		if json.Unmarshal(m["remote_block_ids"], &ids) != nil {
			return nil, bad(".remote_block_ids", "must be a list of block ids")
		}
		p.blockIDs = make([]int, len(ids))
		for i, v := range ids {
			if err := strictInt(v, &p.blockIDs[i]); err != nil || p.blockIDs[i] < 0 {
				return nil, bad(".remote_block_ids", "element %d must be a non-negative integer, got %.40s", i, v)
			}
		}
	}
	if !isNull("tp_size") {
		var tp int
		if err := strictInt(m["tp_size"], &tp); err != nil || tp < 1 {
			return nil, bad(".tp_size", "must be a positive integer, got %.40s", m["tp_size"])
		}
	}
	if p.remoteDecode && p.remotePrefill {
		return nil, bad("", "do_remote_decode and do_remote_prefill cannot both be true")
	}
	if p.remotePrefill {
		for _, f := range []struct {
			key     string
			missing bool
		}{
			{"remote_engine_id", p.engineID == ""}, {"remote_block_ids", isNull("remote_block_ids")},
			{"remote_host", p.host == ""}, {"remote_port", p.port == 0}, {"remote_request_id", p.requestID == ""},
		} {
			if f.missing {
				return nil, bad("."+f.key, "is required when do_remote_prefill is true (send what the prefill response returned)")
			}
		}
	}
	return p, nil
}

// strictInt decodes a JSON integer literal (not a float, not a string).
func strictInt(raw json.RawMessage, dst *int) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return errors.New("not a number") // json.Number would take a quoted one
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var n json.Number
	if err := d.Decode(&n); err != nil {
		return err
	}
	v, err := strconv.Atoi(n.String())
	if err != nil {
		return err
	}
	*dst = v
	return nil
}
