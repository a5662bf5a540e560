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

// Package workload declares kvbench's workloads (YAML specs under bench/workloads/), generates
// their requests deterministically from a seed, and reads the public request traces (Mooncake
// FAST'25 JSONL, Azure 2023 CSV) into the same request form. Simulation and live mode consume
// the same requests.
package workload

import (
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// Kinds of workload.
const (
	KindSharedPrefix = "shared-prefix"
	KindMultiTurn    = "multi-turn"
	KindAgentic      = "agentic"
	KindUnique       = "unique"
	KindHotPrefix    = "hot-prefix"
	KindZipf         = "zipf"
	KindSiblings     = "siblings"
	KindTrace        = "trace"
	KindLoRA         = "lora"
	KindMix          = "mix"
)

// Spec is one workload file.
type Spec struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Kind        string `json:"kind"`
	Seed        uint64 `json:"seed"`
	Fleet       Fleet  `json:"fleet"`
	Load        Load   `json:"load"`
	SLO         SLO    `json:"slo"`
	// ScaleUp adds replicas part-way through each run.
	ScaleUp *ScaleUp `json:"scaleUp,omitempty"`
	// Output sets the max_tokens clients send when output lengths are drawn (Options.EOS).
	Output *Output `json:"output,omitempty"`

	SharedPrefix *SharedPrefix `json:"sharedPrefix,omitempty"`
	MultiTurn    *Sessions     `json:"multiTurn,omitempty"`
	Agentic      *Sessions     `json:"agentic,omitempty"`
	Unique       *Unique       `json:"unique,omitempty"`
	HotPrefix    *PrefixMix    `json:"hotPrefix,omitempty"`
	Zipf         *PrefixMix    `json:"zipf,omitempty"`
	Siblings     *Siblings     `json:"siblings,omitempty"`
	Trace        *Trace        `json:"trace,omitempty"`
	LoRA         *LoRAMix      `json:"lora,omitempty"`
	Mix          *Mix          `json:"mix,omitempty"`
}

// Fleet is the simulated engine fleet (simulation mode only; live mode uses what it targets).
type Fleet struct {
	Engines int `json:"engines"`
	// Profile is an internal/sim/timing profile name (default h100-qwen2.5-32b-tp2).
	Profile   string `json:"profile,omitempty"`
	BlockSize int    `json:"blockSize,omitempty"` // default 64
	// NumBlocks overrides the KV capacity per engine (0: derived from the profile).
	NumBlocks   int `json:"numBlocks,omitempty"`
	MaxModelLen int `json:"maxModelLen,omitempty"`
	// MaxLoRAs is each engine's LoRA adapter slots (vLLM --max-loras); 0 turns LoRA off. A lora
	// workload needs it.
	MaxLoRAs int `json:"maxLoRAs,omitempty"`
	// LoRALoadSeconds is the time to load an adapter into a slot (vllm-sim --lora-load-time);
	// default 0.025.
	LoRALoadSeconds float64 `json:"loraLoadSeconds,omitempty"`
	// Disaggregation splits the fleet into a prefill and a decode pool for P/D policies; the
	// other policies run on the same engines unsplit (the same GPU budget, all aggregated).
	Disaggregation *Disaggregation `json:"disaggregation,omitempty"`
}

// Disaggregation is a fleet of Prefill prefill-role and Decode decode-role engines whose KV
// caches cross Transport (an internal/sim/timing transport: nvlink, rdma, roce, tcp; default
// rdma). fleet.engines, when set, must equal Prefill + Decode.
type Disaggregation struct {
	Prefill   int    `json:"prefill"`
	Decode    int    `json:"decode"`
	Transport string `json:"transport,omitempty"`
}

// Load is the arrival process of one run; each entry of Rates is one run of a sweep.
type Load struct {
	// Rates in requests per second (Poisson). For trace workloads they are speed-up factors
	// applied to the trace's timestamps (1 = as recorded).
	Rates []float64 `json:"rates"`
	// Requests caps the requests of one run; Duration (seconds of arrivals) caps it too.
	Requests int     `json:"requests,omitempty"`
	Duration float64 `json:"duration,omitempty"`
	// Primary is the rate whose run the headline table reports (default: the highest).
	Primary float64 `json:"primary,omitempty"`
}

// SLO is the service-level objective goodput is measured against: a request counts toward
// goodput when its TTFT and its mean inter-token latency are within the targets.
type SLO struct {
	TTFTSeconds float64 `json:"ttftSeconds"`
	ITLSeconds  float64 `json:"itlSeconds"`
}

// ScaleUp adds Add engines at AtFraction of the arrival window.
type ScaleUp struct {
	AtFraction float64 `json:"atFraction"`
	Add        int     `json:"add"`
}

// SharedPrefix is the llm-d / inference-perf shared_prefix workload: Groups system prompts, each
// with PromptsPerGroup questions; every request picks one of the Groups×PromptsPerGroup prompts.
type SharedPrefix struct {
	Groups          int `json:"groups"`
	PromptsPerGroup int `json:"promptsPerGroup"`
	SystemTokens    int `json:"systemTokens"`
	QuestionTokens  int `json:"questionTokens"`
	OutputTokens    int `json:"outputTokens"`
}

// Sessions describes multi-turn chat and agentic loops: each session opens with a shared system
// prompt (one of SystemPrompts), then Turns requests, each continuing the previous one (prompt +
// answer + a new user message or tool result of NewTokens) after ThinkSeconds (exponential mean).
type Sessions struct {
	SystemPrompts int     `json:"systemPrompts"`
	SystemTokens  int     `json:"systemTokens"`
	Turns         int     `json:"turns"`
	FirstTokens   int     `json:"firstTokens"`
	NewTokens     int     `json:"newTokens"`
	OutputTokens  int     `json:"outputTokens"`
	ThinkSeconds  float64 `json:"thinkSeconds"`
}

// Unique prompts share nothing.
type Unique struct {
	PromptTokens int `json:"promptTokens"`
	OutputTokens int `json:"outputTokens"`
}

// PrefixMix draws a prefix per request (one hot prefix with probability HotShare for hot-prefix;
// Zipf(S) over Prefixes for zipf) and appends a unique suffix.
type PrefixMix struct {
	Prefixes     int     `json:"prefixes"`
	S            float64 `json:"s,omitempty"`
	HotShare     float64 `json:"hotShare,omitempty"`
	PrefixTokens int     `json:"prefixTokens"`
	SuffixTokens int     `json:"suffixTokens"`
	OutputTokens int     `json:"outputTokens"`
}

// Siblings are bursts of N identical requests (n parallel samples of one prompt).
type Siblings struct {
	N            int `json:"count"`
	PromptTokens int `json:"promptTokens"`
	OutputTokens int `json:"outputTokens"`
}

// LoRAMix is a multi-adapter workload: each request is for one of Adapters LoRA adapters drawn
// with Zipf(S) popularity (S <= 1: uniform), or for the base model with probability BaseShare;
// it opens with one of its adapter's PrefixesPerAdapter shared prefixes (uniformly drawn; the
// base model has as many of its own) and ends with a unique suffix.
type LoRAMix struct {
	Adapters           int     `json:"adapters"`
	S                  float64 `json:"s,omitempty"`
	BaseShare          float64 `json:"baseShare,omitempty"`
	PrefixesPerAdapter int     `json:"prefixesPerAdapter"`
	PrefixTokens       int     `json:"prefixTokens"`
	SuffixTokens       int     `json:"suffixTokens"`
	OutputTokens       int     `json:"outputTokens"`
}

// Mix draws each Poisson arrival's class by share, with prompt and answer lengths uniform in
// each class's ranges; Bursts adds requests of one class in bursts on top of the Poisson stream
// (the long-prompt bursts that stall the decodes of an aggregated fleet).
type Mix struct {
	Classes []MixClass `json:"classes"`
	Bursts  *Bursts    `json:"bursts,omitempty"`
}

// MixClass is one kind of request: an optional shared prefix (one of Prefixes, uniformly drawn,
// of PrefixTokens), then a unique part of MinPromptTokens..MaxPromptTokens, and an answer of
// MinOutputTokens..MaxOutputTokens (a max of 0 means the min: a fixed length).
type MixClass struct {
	Name            string  `json:"name"`
	Share           float64 `json:"share,omitempty"`
	Prefixes        int     `json:"prefixes,omitempty"`
	PrefixTokens    int     `json:"prefixTokens,omitempty"`
	MinPromptTokens int     `json:"minPromptTokens"`
	MaxPromptTokens int     `json:"maxPromptTokens,omitempty"`
	MinOutputTokens int     `json:"minOutputTokens"`
	MaxOutputTokens int     `json:"maxOutputTokens,omitempty"`
}

// Bursts sends Count requests of the class named Class every EverySeconds, their arrivals
// spread uniformly over SpreadSeconds, the first burst at EverySeconds.
type Bursts struct {
	Class         string  `json:"class"`
	EverySeconds  float64 `json:"everySeconds"`
	Count         int     `json:"count"`
	SpreadSeconds float64 `json:"spreadSeconds,omitempty"`
}

// AdapterName is the model name of adapter i of a lora workload.
func AdapterName(i int) string { return fmt.Sprintf("adapter-%02d", i) }

// Trace replays a public trace.
type Trace struct {
	// Format is "mooncake" (JSONL with hash_ids) or "azure" (CSV of lengths and timestamps).
	Format string `json:"format"`
	// File is the trace's file name, resolved against the --traces directory.
	File string `json:"file"`
	// BlockTokens is the trace's hash block size (Mooncake: 512).
	BlockTokens int `json:"blockTokens,omitempty"`
	// MaxOutputTokens caps output lengths (0: as recorded).
	MaxOutputTokens int `json:"maxOutputTokens,omitempty"`
}

// LoadFile reads and validates a workload file.
func LoadFile(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Spec
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		return nil, fmt.Errorf("workload %s: %w", path, err)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("workload %s: %w", path, err)
	}
	return &s, nil
}

// Validate fills defaults and checks that the kind's section is present and sane.
func (s *Spec) Validate() error {
	if s.Name == "" {
		return errors.New("name is required")
	}
	if err := s.Fleet.validateDisaggregation(s.ScaleUp != nil); err != nil {
		return err
	}
	if s.Fleet.Engines < 1 {
		return errors.New("fleet.engines must be at least 1")
	}
	if s.Fleet.BlockSize == 0 {
		s.Fleet.BlockSize = 64
	}
	if s.Fleet.Profile == "" {
		s.Fleet.Profile = "h100-qwen2.5-32b-tp2"
	}
	if len(s.Load.Rates) == 0 {
		return errors.New("load.rates needs at least one rate")
	}
	for _, r := range s.Load.Rates {
		if !(r > 0) {
			return fmt.Errorf("load.rates must be positive, got %v", r)
		}
	}
	if s.Load.Requests <= 0 && s.Load.Duration <= 0 && s.Kind != KindTrace {
		return errors.New("load.requests or load.duration must bound the run")
	}
	if s.SLO.TTFTSeconds <= 0 || s.SLO.ITLSeconds <= 0 {
		return errors.New("slo.ttftSeconds and slo.itlSeconds must be positive")
	}
	if s.Output != nil && s.Output.CapTokens < 0 {
		return errors.New("output.capTokens must not be negative")
	}
	if s.ScaleUp != nil && (s.ScaleUp.Add < 1 || s.ScaleUp.AtFraction <= 0 || s.ScaleUp.AtFraction >= 1) {
		return errors.New("scaleUp needs add >= 1 and 0 < atFraction < 1")
	}
	present := map[string]bool{
		KindSharedPrefix: s.SharedPrefix != nil, KindMultiTurn: s.MultiTurn != nil, KindAgentic: s.Agentic != nil,
		KindUnique: s.Unique != nil, KindHotPrefix: s.HotPrefix != nil, KindZipf: s.Zipf != nil,
		KindSiblings: s.Siblings != nil, KindTrace: s.Trace != nil, KindLoRA: s.LoRA != nil, KindMix: s.Mix != nil,
	}
	has, known := present[s.Kind]
	if !known {
		return fmt.Errorf("unknown kind %q", s.Kind)
	}
	if !has {
		return fmt.Errorf("kind %s needs a %s section", s.Kind, s.Kind)
	}
	if s.Fleet.MaxLoRAs < 0 || s.Fleet.LoRALoadSeconds < 0 {
		return errors.New("fleet.maxLoRAs and fleet.loraLoadSeconds must not be negative")
	}
	if s.Fleet.MaxLoRAs > 0 && s.Fleet.LoRALoadSeconds == 0 {
		s.Fleet.LoRALoadSeconds = 0.025
	}
	if l := s.LoRA; l != nil && s.Kind == KindLoRA {
		switch {
		case s.Fleet.MaxLoRAs < 1:
			return errors.New("kind lora needs fleet.maxLoRAs >= 1")
		case l.Adapters < 1 || l.PrefixesPerAdapter < 1:
			return errors.New("lora.adapters and lora.prefixesPerAdapter must be at least 1")
		case l.BaseShare < 0 || l.BaseShare >= 1:
			return errors.New("lora.baseShare must be within [0, 1)")
		case l.PrefixTokens < 0 || l.SuffixTokens < 0 || l.PrefixTokens+l.SuffixTokens < 1 || l.OutputTokens < 1:
			return errors.New("lora needs a prompt (prefixTokens + suffixTokens >= 1) and outputTokens >= 1")
		}
	}
	if m := s.Mix; m != nil && s.Kind == KindMix {
		if err := m.validate(); err != nil {
			return err
		}
	}
	if s.Trace != nil {
		if s.Trace.Format != "mooncake" && s.Trace.Format != "azure" {
			return fmt.Errorf("trace.format must be mooncake or azure, got %q", s.Trace.Format)
		}
		if s.Trace.BlockTokens == 0 {
			s.Trace.BlockTokens = 512
		}
	}
	return nil
}

func (m *Mix) validate() error {
	if len(m.Classes) == 0 {
		return errors.New("mix needs at least one class")
	}
	names := map[string]bool{}
	share := 0.0
	for i := range m.Classes {
		c := &m.Classes[i]
		if c.Name == "" || names[c.Name] {
			return fmt.Errorf("mix.classes[%d] needs a unique name", i)
		}
		names[c.Name] = true
		if c.MaxPromptTokens == 0 {
			c.MaxPromptTokens = c.MinPromptTokens
		}
		if c.MaxOutputTokens == 0 {
			c.MaxOutputTokens = c.MinOutputTokens
		}
		switch {
		case c.Share < 0:
			return fmt.Errorf("mix class %s: share must not be negative", c.Name)
		case c.Prefixes < 0 || c.PrefixTokens < 0 || (c.Prefixes > 0) != (c.PrefixTokens > 0):
			return fmt.Errorf("mix class %s: prefixes and prefixTokens go together and must not be negative", c.Name)
		case c.MinPromptTokens < 0 || c.MaxPromptTokens < c.MinPromptTokens || c.PrefixTokens+c.MaxPromptTokens < 1:
			return fmt.Errorf("mix class %s: needs 0 <= minPromptTokens <= maxPromptTokens and a prompt of at least one token", c.Name)
		case c.MinOutputTokens < 1 || c.MaxOutputTokens < c.MinOutputTokens:
			return fmt.Errorf("mix class %s: needs 1 <= minOutputTokens <= maxOutputTokens", c.Name)
		}
		share += c.Share
	}
	if !(share > 0) {
		return errors.New("mix: the classes' shares must add up to more than 0")
	}
	if b := m.Bursts; b != nil {
		switch {
		case !names[b.Class]:
			return fmt.Errorf("mix.bursts.class %q names no class", b.Class)
		case !(b.EverySeconds > 0) || b.Count < 1:
			return errors.New("mix.bursts needs everySeconds > 0 and count >= 1")
		case b.SpreadSeconds < 0 || b.SpreadSeconds > b.EverySeconds:
			return errors.New("mix.bursts.spreadSeconds must be within [0, everySeconds]")
		}
	}
	return nil
}

// validateDisaggregation checks the pool sizes and the transport and fills fleet.engines.
func (f *Fleet) validateDisaggregation(scaleUp bool) error {
	d := f.Disaggregation
	if d == nil {
		return nil
	}
	if d.Prefill < 1 || d.Decode < 1 {
		return fmt.Errorf("fleet.disaggregation needs prefill >= 1 and decode >= 1, got prefill %d, decode %d", d.Prefill, d.Decode)
	}
	if d.Transport == "" {
		d.Transport = "rdma"
	}
	if _, err := timing.LookupTransport(d.Transport); err != nil {
		return fmt.Errorf("fleet.disaggregation.transport: %w", err)
	}
	switch {
	case f.Engines == 0:
		f.Engines = d.Prefill + d.Decode
	case f.Engines != d.Prefill+d.Decode:
		return fmt.Errorf("fleet.engines (%d) must equal fleet.disaggregation prefill + decode (%d); leave it out to derive it", f.Engines, d.Prefill+d.Decode)
	}
	if scaleUp {
		return errors.New("scaleUp cannot be combined with fleet.disaggregation (which pool would grow is not defined)")
	}
	return nil
}

// PrimaryRate is the rate reported in the headline table.
func (s *Spec) PrimaryRate() float64 {
	if s.Load.Primary > 0 {
		return s.Load.Primary
	}
	m := 0.0
	for _, r := range s.Load.Rates {
		m = max(m, r)
	}
	return m
}
