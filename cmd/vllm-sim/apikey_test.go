package main

import (
	"slices"
	"testing"
)

func TestAPIKeyFlagAndEnv(t *testing.T) {
	t.Setenv("VLLM_API_KEY", "from-env")
	s, err := parseSettings([]string{"--model", "m"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.apiKeys, []string{"from-env"}) {
		t.Errorf("VLLM_API_KEY alone: keys %q", s.apiKeys)
	}
	// As in vLLM, the flag wins; it takes several keys.
	s, err = parseSettings([]string{"--model", "m", "--api-key", "a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.apiKeys, []string{"a", "b"}) {
		t.Errorf("--api-key a b with VLLM_API_KEY set: keys %q", s.apiKeys)
	}
	t.Setenv("VLLM_API_KEY", "")
	s, err = parseSettings([]string{"--model", "m"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.apiKeys) != 0 {
		t.Errorf("no key configured: keys %q", s.apiKeys)
	}
}

func TestUnknownFlagsLoggedWithoutValues(t *testing.T) {
	s, err := parseSettings([]string{"--model", "m", "--hf-token", "hf_secret", "--download-dir=/secret/path", "--trust-remote-code"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := flagNames(s.unknown), []string{"--hf-token", "--download-dir", "--trust-remote-code"}; !slices.Equal(got, want) {
		t.Errorf("flagNames = %q, want %q", got, want)
	}
}
