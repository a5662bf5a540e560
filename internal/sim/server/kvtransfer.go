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
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// KVTransferOptions make a Server play the legs of a disaggregated request the way vLLM's
// NixlConnector does: a prefill leg (kv_transfer_params.do_remote_decode) keeps its KV blocks for
// a decode engine and answers where to pull them from; a decode leg (do_remote_prefill) pulls the
// blocks it lacks over the side channel, waiting the transfer time, and recomputes only the last
// prompt token.
type KVTransferOptions struct {
	Connector string
	// Role is kv_both, kv_producer (prefill legs only) or kv_consumer (decode legs only).
	Role string
	// EngineID fixes the advertised engine id; empty: a random one per start and restart.
	EngineID string
	// LoadFailurePolicy is "fail" (a failed pull fails the request) or "recompute"; empty
	// recomputes. --kv-transfer-config without the field means "fail", as in vLLM.
	LoadFailurePolicy string
	// Host and Port are the side channel this engine advertises in its prefill responses; the
	// caller serves SideChannelHandler there.
	Host string
	Port int
	// Transport prices the decode leg's pulls.
	Transport timing.Transport
	// Timeout is the simulated time a prefill keeps blocks that no decode engine pulls.
	Timeout time.Duration
	// Client makes the decode leg's side-channel calls (default: a client with a 10 s timeout).
	Client *http.Client
}

// kvState is a Server's disaggregation state, guarded by Server.mu.
type kvState struct {
	opt      *KVTransferOptions
	engineID string
	held     map[string]*heldKV
	met      *kvMetrics
	client   *http.Client
}

// heldKV is a finished prefill leg whose blocks wait for a decode engine.
type heldKV struct {
	blocks []int
	timer  *time.Timer
}

func newKVState(opt *KVTransferOptions, m *metrics) *kvState {
	k := &kvState{opt: opt, held: map[string]*heldKV{}, met: newKVMetrics(m), client: opt.Client}
	if k.client == nil {
		k.client = &http.Client{Timeout: 10 * time.Second}
	}
	k.newEngineID()
	return k
}

func (k *kvState) newEngineID() {
	k.engineID = k.opt.EngineID
	if k.engineID == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80 // a version 4 UUID, as vLLM draws
		k.engineID = fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
	}
}

// restart forgets every hold (the engine's restart dropped the blocks) and, like a new process,
// takes a new engine id: decode engines that pull from the old one are refused.
func (k *kvState) restart() {
	for _, h := range k.held {
		h.timer.Stop()
	}
	clear(k.held)
	k.newEngineID()
	k.met.heldBlocks.Set(0)
	k.met.heldRequests.Set(0)
}

// EngineID is the engine id this engine's prefill responses advertise now ("" without
// KVTransfer).
func (s *Server) EngineID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv == nil {
		return ""
	}
	return s.kv.engineID
}

// prepareKV reads a request's kv_transfer_params into j when the engine has a KV connector.
func (s *Server) prepareKV(j *job, p *commonParams) error {
	if s.kv == nil {
		return nil // as vLLM without a connector: the field is not used
	}
	kp, err := parseKVParams(p.KVTransfer)
	if err != nil || kp == nil {
		return err
	}
	role := s.opt.KVTransfer.Role
	switch {
	case kp.remoteDecode && p.Stream:
		return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", param: "stream",
			msg: "kv_transfer_params.do_remote_decode needs a non-streamed request (the prefill leg answers in one response)"}
	case kp.remoteDecode && role == roleConsumer:
		return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", param: "kv_transfer_params.do_remote_decode",
			msg: "this engine is a kv_consumer: it serves decode legs, not prefill legs (do_remote_decode)"}
	case kp.remotePrefill && role == roleProducer:
		return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", param: "kv_transfer_params.do_remote_prefill",
			msg: "this engine is a kv_producer: it serves prefill legs, not decode legs (do_remote_prefill)"}
	}
	j.kv = kp
	j.req.HoldKV = kp.remoteDecode
	return nil
}

// holdKV registers a finished prefill leg's blocks; called with s.mu held.
func (s *Server) holdKV(r *engine.Request) {
	id := r.ID
	h := &heldKV{blocks: r.BlockIDs()}
	wall := time.Duration(float64(s.opt.KVTransfer.Timeout) / s.opt.TimeScale)
	h.timer = time.AfterFunc(wall, func() { s.expireKV(id, h) })
	s.kv.held[id] = h
	s.updateHeld()
	s.log.Debug("KV held for a remote decode", "request_id", id, "blocks", len(h.blocks))
}

func (s *Server) expireKV(id string, h *heldKV) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv.held[id] != h {
		return // pulled, or dropped by a restart
	}
	s.dropHeld(id)
	s.kv.met.expired.With(s.met.labels).Inc()
	s.log.Info("KV blocks of a prefill leg expired: no decode engine pulled them", "request_id", id, "blocks", len(h.blocks),
		"timeout", s.opt.KVTransfer.Timeout)
}

// dropHeld frees a hold; called with s.mu held.
func (s *Server) dropHeld(id string) {
	if h := s.kv.held[id]; h != nil {
		h.timer.Stop()
		delete(s.kv.held, id)
	}
	s.eng.Release(id)
	s.updateHeld()
	s.poke()
}

func (s *Server) updateHeld() {
	st := s.eng.Stats()
	s.kv.met.heldBlocks.Set(float64(st.HeldBlocks))
	s.kv.met.heldRequests.Set(float64(st.HeldRequests))
}

// heldParams is the kv_transfer_params of a prefill response: where the decode engine pulls the
// blocks from (vLLM's NixlConnector request_finished). nil when the blocks are gone already.
func (s *Server) heldParams(id string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.kv.held[id]
	if h == nil {
		return nil
	}
	return map[string]any{
		"do_remote_prefill": true, "do_remote_decode": false,
		"remote_engine_id": s.kv.engineID, "remote_block_ids": h.blocks,
		"remote_host": s.opt.KVTransfer.Host, "remote_port": s.opt.KVTransfer.Port,
		"remote_request_id": id, "tp_size": s.eng.Config().Profile.TP,
	}
}

// The side channel: what the decode engine asks the prefill engine. vLLM's NIXL connector
// handshakes over ZMQ, reads the blocks with RDMA and notifies the prefill engine when done; the
// simulator keeps the two ends of that exchange as HTTP calls and the read as a wait.
const (
	pullPath = "/kv/pull" // start of a read: is the request still held, and which blocks
	donePath = "/kv/done" // end of a read: the prefill engine frees the blocks
)

type sideRequest struct {
	EngineID  string `json:"engine_id"`
	RequestID string `json:"request_id"`
}

type pullResponse struct {
	EngineID  string `json:"engine_id"`
	RequestID string `json:"request_id"`
	BlockIDs  []int  `json:"block_ids"`
	BlockSize int    `json:"block_size"`
}

// SideChannelHandler serves the KV side channel (nil without KVTransfer): POST /kv/pull and
// POST /kv/done with {"engine_id", "request_id"}; 404 when the request holds no blocks (unknown,
// pulled or expired), 409 when the engine id is not this engine's (it restarted).
func (s *Server) SideChannelHandler() http.Handler {
	if s.kv == nil {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pullPath, func(w http.ResponseWriter, r *http.Request) { s.handleSide(w, r, false) })
	mux.HandleFunc("POST "+donePath, func(w http.ResponseWriter, r *http.Request) { s.handleSide(w, r, true) })
	return mux
}

func (s *Server) handleSide(w http.ResponseWriter, r *http.Request, done bool) {
	var req sideRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.EngineID == "" || req.RequestID == "" {
		writeError(w, badRequest("engine_id and request_id are required"))
		return
	}
	status, resp := s.sideAnswer(req, done)
	if err, ok := resp.(error); ok {
		writeError(w, err)
		return
	}
	if resp == nil {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, resp)
}

// sideAnswer does a side-channel call's work under the lock; the answer is written after.
func (s *Server) sideAnswer(req sideRequest, done bool) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.EngineID != s.kv.engineID {
		return 0, &apiError{status: http.StatusConflict, typ: "ConflictError", param: "engine_id",
			msg: fmt.Sprintf("engine id %q is not this engine's (it restarted?)", req.EngineID)}
	}
	h := s.kv.held[req.RequestID]
	if h == nil {
		return 0, &apiError{status: http.StatusNotFound, typ: "NotFoundError", param: "request_id",
			msg: fmt.Sprintf("request %q holds no KV blocks here (unknown, already pulled, or expired)", req.RequestID)}
	}
	if done {
		s.dropHeld(req.RequestID)
		s.log.Debug("KV pulled by a decode engine", "request_id", req.RequestID, "blocks", len(h.blocks))
		return http.StatusNoContent, nil
	}
	return http.StatusOK, pullResponse{EngineID: s.kv.engineID, RequestID: req.RequestID, BlockIDs: h.blocks,
		BlockSize: s.eng.Config().BlockSize}
}

// transferError is a failed pull, with the reason counted in the metrics.
type transferError struct {
	reason string
	err    error
}

func (e *transferError) Error() string { return e.reason + ": " + e.err.Error() }

// pullKV runs a decode leg's transfer before the request is submitted: it pulls the full blocks
// of the prompt (less its last token) that the local prefix cache lacks and sets KVTransferred.
// A failed pull leaves KVTransferred at 0, so the engine recomputes the prompt, unless the
// failure policy is "fail". It returns an error only for that policy or when ctx ends.
func (s *Server) pullKV(ctx context.Context, j *job) error {
	p := j.kv
	cfg := s.eng.Config()
	bs := cfg.BlockSize
	want := min(len(p.blockIDs)*bs, j.promptN-1) / bs * bs
	s.mu.Lock()
	cached := min(s.eng.CachedPrefixTokens(j.req.Prompt, j.req.LoRA, j.req.CacheSalt), want)
	delay := s.faults.KVTransferDelay
	fail := s.faults.KVTransferFailFraction > 0 && s.rng.Float64() < s.faults.KVTransferFailFraction
	s.mu.Unlock()
	pull := want - cached

	secs, err := s.transfer(ctx, p, pull, delay, fail)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	m := s.kv.met
	if err != nil {
		var te *transferError
		reason := "error"
		if errors.As(err, &te) {
			reason = te.reason
		}
		m.failures.WithLabelValues(reason).Inc()
		m.nixlFailed.With(s.met.labels).Inc()
		if s.opt.KVTransfer.LoadFailurePolicy == "fail" {
			m.transfers.WithLabelValues("failed").Inc()
			return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError",
				msg: "KV transfer from the prefill engine failed (kv_load_failure_policy fail): " + err.Error()}
		}
		m.transfers.WithLabelValues("recomputed").Inc()
		s.log.Warn("KV pull failed; recomputing the prompt", "request_id", j.id, "remote_request_id", p.requestID,
			"remote", net.JoinHostPort(p.host, strconv.Itoa(p.port)), "reason", reason, "err", err)
		return nil
	}
	j.req.KVTransferred = want
	m.transfers.WithLabelValues("ok").Inc()
	m.seconds.Observe(secs)
	m.nixlSeconds.With(s.met.labels).Observe(secs)
	m.blocks.Add(float64(pull / bs))
	m.nixlBytes.With(s.met.labels).Observe(cfg.Profile.KVBytesPerToken() * float64(pull))
	return nil
}

// transfer is one pull: the handshake, the read (a wait of the modelled transfer time, scaled,
// plus the delay fault) and the completion notice. It returns the simulated seconds it took.
func (s *Server) transfer(ctx context.Context, p *kvParams, tokens int, delay time.Duration, fail bool) (float64, error) {
	req := sideRequest{EngineID: p.engineID, RequestID: p.requestID}
	var info pullResponse
	if err := s.side(ctx, p, pullPath, req, &info); err != nil {
		return 0, err
	}
	if bs := s.eng.Config().BlockSize; info.BlockSize != bs {
		return 0, &transferError{"block_size_mismatch", fmt.Errorf("remote block size %d, local %d", info.BlockSize, bs)}
	}
	secs := s.eng.Config().Profile.TransferTime(tokens, s.opt.KVTransfer.Transport) + delay.Seconds()*s.opt.TimeScale
	t := time.NewTimer(time.Duration(secs / s.opt.TimeScale * float64(time.Second)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-t.C:
	}
	if fail {
		return 0, &transferError{"injected", errors.New("injected KV transfer failure")}
	}
	if err := s.side(ctx, p, donePath, req, nil); err != nil {
		return 0, err
	}
	return secs, nil
}

// side makes one side-channel call and sorts its failures into reasons.
func (s *Server) side(ctx context.Context, p *kvParams, path string, body any, out any) error {
	b, _ := json.Marshal(body)
	url := "http://" + net.JoinHostPort(p.host, strconv.Itoa(p.port)) + path
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return &transferError{"bad_address", err}
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := s.kv.client.Do(hr)
	if err != nil {
		return &transferError{"unreachable", err}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return &transferError{"not_found", fmt.Errorf("%s: %s", path, raw)}
	case resp.StatusCode == http.StatusConflict:
		return &transferError{"engine_mismatch", fmt.Errorf("%s: %s", path, raw)}
	case resp.StatusCode >= 300:
		return &transferError{"refused", fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, raw)}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return &transferError{"refused", fmt.Errorf("%s: %w", path, err)}
		}
	}
	return nil
}
