package main

import (
	"fmt"
	"strings"
)

// argSpec says how a known flag takes its value.
type argSpec int

const (
	single  argSpec = iota // --flag VALUE or --flag=VALUE
	boolean                // --flag, --flag=true|false, --no-flag
	multi                  // --flag V1 V2 ... (vLLM's nargs="+")
)

// parsedArgs is the result of parseArgs.
type parsedArgs struct {
	values     map[string][]string // canonical flag name -> values (last wins for single)
	positional []string
	unknown    []string // unmodelled vLLM flags, as given
}

// parseArgs reads a vLLM-style command line: "--name value", "--name=value", underscores or dashes
// in names, boolean flags without a value and "--no-" negations, multi-value flags, and a leading
// positional model ("vllm serve MODEL"). Flags not in spec are accepted and reported in unknown;
// an unknown flag swallows the next argument when that does not look like a flag, which matches
// how vLLM's value-taking options are written.
func parseArgs(args []string, spec map[string]argSpec) (parsedArgs, error) {
	p := parsedArgs{values: map[string][]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "serve" && i == 0 {
			continue // "vllm-sim serve MODEL ..." like "vllm serve"
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			p.positional = append(p.positional, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		name = strings.ReplaceAll(name, "_", "-")
		if short, ok := shortFlags[name]; ok {
			name = short
		}
		kind, known := spec[name]
		if !known && strings.HasPrefix(name, "no-") {
			if k, ok := spec[strings.TrimPrefix(name, "no-")]; ok && k == boolean {
				if hasVal {
					return p, fmt.Errorf("flag --%s takes no value", name)
				}
				p.values[strings.TrimPrefix(name, "no-")] = []string{"false"}
				continue
			}
		}
		if !known {
			p.unknown = append(p.unknown, a)
			if !hasVal && i+1 < len(args) && !looksLikeFlag(args[i+1]) {
				i++
				p.unknown[len(p.unknown)-1] += " " + args[i]
			}
			continue
		}
		switch kind {
		case boolean:
			if !hasVal {
				val = "true"
			}
			p.values[name] = []string{val}
		case single:
			if !hasVal {
				if i+1 >= len(args) {
					return p, fmt.Errorf("flag --%s needs a value", name)
				}
				i++
				val = args[i]
			}
			p.values[name] = []string{val}
		case multi:
			var vals []string
			if hasVal {
				vals = append(vals, val)
			}
			for i+1 < len(args) && !looksLikeFlag(args[i+1]) {
				i++
				vals = append(vals, args[i])
			}
			if len(vals) == 0 {
				return p, fmt.Errorf("flag --%s needs at least one value", name)
			}
			p.values[name] = append(p.values[name], vals...)
		}
	}
	return p, nil
}

// looksLikeFlag is true for "--x" and "-x" but not for negative numbers.
func looksLikeFlag(s string) bool {
	if !strings.HasPrefix(s, "-") || len(s) < 2 {
		return false
	}
	c := s[1]
	return c == '-' || (c < '0' || c > '9') && c != '.'
}

// vLLM's short aliases.
var shortFlags = map[string]string{"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size", "dp": "data-parallel-size"}
