package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// The CLI path end to end: a small simulation writes report.json and report.html with one entry
// per policy, and `compare` merges two reports.
func TestSimulateWritesReports(t *testing.T) {
	out := t.TempDir()
	args := []string{"--policies", "kvrouter,round-robin", "--requests", "60", "--rates", "100", "--quiet",
		"--out", out, filepath.Join("..", "..", "bench", "workloads", "demo.yaml")}
	if err := runSimulate(args, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "demo", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Workload string `json:"workload"`
		Policies []struct {
			Policy    string `json:"policy"`
			Completed int    `json:"completed"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Workload != "demo" || len(r.Policies) != 2 || r.Policies[0].Policy != "kvrouter" || r.Policies[1].Completed != 60 {
		t.Fatalf("unexpected report %+v", r)
	}
	if _, err := os.Stat(filepath.Join(out, "demo", "report.html")); err != nil {
		t.Fatal(err)
	}
	rep := filepath.Join(out, "demo", "report.json")
	if err := runCompare([]string{"--out", filepath.Join(out, "cmp"), rep, rep}); err != nil {
		t.Fatal(err)
	}
	if err := runSimulate([]string{"--policies", "nope", "x.yaml"}, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("an unknown policy must be an error")
	}
}
