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
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kvrouter/internal/router/proxy"
	"github.com/kvrouter/kvrouter/internal/router/tokenize"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// tokenizerOptions are the in-process tokenizer's flags (docs/tokenizer.md).
type tokenizerOptions struct {
	mode, dir, model, revision, hfEndpoint string
	verifyFraction                         float64
}

func addTokenizerFlags(fs *flag.FlagSet, o *tokenizerOptions, lookupEnv func(string) (string, bool)) {
	endpoint, ok := lookupEnv("HF_ENDPOINT")
	if !ok || endpoint == "" {
		endpoint = "https://huggingface.co"
	}
	fs.StringVar(&o.mode, "tokenizer", proxy.TokenizerAuto, "where prompts are tokenized: auto (in process once the model's tokenizer is loaded and agrees with an engine's /tokenize on a start sample; the engines until then), local (in process as soon as it is loaded), engine (always an engine's /tokenize). Any mismatch with an engine switches to the engines until restart")
	fs.StringVar(&o.dir, "tokenizer-dir", "", "directory holding the model's tokenizer.json (and tokenizer_config.json): a model directory, an HF cache snapshot, or the HF cache (the engines' model cache volume) holding --tokenizer-model; empty: download from the Hub")
	fs.StringVar(&o.model, "tokenizer-model", "", "Hugging Face repository of the tokenizer (default: --model when it is of the form org/name)")
	fs.StringVar(&o.revision, "tokenizer-revision", "main", "revision of --tokenizer-model (branch, tag or commit)")
	fs.StringVar(&o.hfEndpoint, "hf-endpoint", endpoint, "Hugging Face Hub (or mirror) to download the tokenizer from (default: $HF_ENDPOINT, else https://huggingface.co); the token is $HF_TOKEN")
	fs.Float64Var(&o.verifyFraction, "tokenizer-verify-fraction", 0.01, "fraction of the requests tokenized in process that an engine's /tokenize also tokenizes, off the request path, to compare (0: none)")
}

// repo is the Hub repository to download from, "" when there is none to try: --model is the
// served model name, which is a repository id only when it looks like one.
func (o *tokenizerOptions) repo(servedModel string) string {
	if o.model != "" {
		return o.model
	}
	if strings.Count(servedModel, "/") == 1 && !strings.HasPrefix(servedModel, "/") && !strings.HasSuffix(servedModel, "/") {
		return servedModel
	}
	return ""
}

func checkTokenizerFlags(o *tokenizerOptions, servedModel string) error {
	switch o.mode {
	case proxy.TokenizerAuto, proxy.TokenizerEngine:
	case proxy.TokenizerLocal:
		if o.dir == "" && o.repo(servedModel) == "" {
			return errors.New("--tokenizer local needs --tokenizer-dir, or --tokenizer-model to download it")
		}
	default:
		return fmt.Errorf("--tokenizer %q: want auto, local or engine", o.mode)
	}
	if !(o.verifyFraction >= 0 && o.verifyFraction <= 1) {
		return fmt.Errorf("--tokenizer-verify-fraction %v: want within 0 and 1", o.verifyFraction)
	}
	return nil
}

// verifyFraction maps the flag's 0 ("none") onto proxy.Config's, where 0 is the default.
func (o *tokenizerOptions) configFraction() float64 {
	if o.verifyFraction == 0 {
		return -1
	}
	return o.verifyFraction
}

// loadTokenizer loads the in-process tokenizer and hands it to srv, retrying with backoff while
// the files are missing or the Hub does not serve them (the engines may still be downloading
// the model into the cache volume); the router tokenizes on the engines meanwhile. A tokenizer
// the package cannot handle is not retried.
func loadTokenizer(ctx context.Context, o *tokenizerOptions, servedModel string, srv *proxy.Server, lookupEnv func(string) (string, bool), log logr.Logger) {
	if o.mode == proxy.TokenizerEngine {
		return
	}
	repo := o.repo(servedModel)
	if o.dir == "" && repo == "" {
		srv.TokenizerLoading("no tokenizer to load: give --tokenizer-dir or --tokenizer-model")
		return
	}
	wait := time.Second
	for {
		t, origin, err := loadTokenizerOnce(ctx, o, repo, lookupEnv)
		if err == nil {
			srv.SetLocalTokenizer(ctx, t, origin)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, tokenizer.ErrUnsupported) {
			log.Info("in-process tokenizer unavailable; tokenizing on the engines", "error", err.Error())
			srv.TokenizerLoading("cannot load the tokenizer: " + err.Error())
			return
		}
		log.Info("in-process tokenizer not loaded yet; tokenizing on the engines meanwhile", "error", err.Error(), "retryIn", wait.String())
		srv.TokenizerLoading("loading the tokenizer failed, retrying: " + err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Minute)
	}
}

var errOffline = errors.New("HF_HUB_OFFLINE is set and the tokenizer is not in the HF cache (yet)")

// hfCacheRoots are where Hugging Face libraries keep their cache, in their order of precedence:
// $HF_HUB_CACHE, $HF_HOME (its hub/), ~/.cache/huggingface. The operator points HF_HOME at the
// engines' model cache volume.
func hfCacheRoots(lookupEnv func(string) (string, bool)) []string {
	var roots []string
	for _, k := range []string{"HF_HUB_CACHE", "HF_HOME"} {
		if v, _ := lookupEnv(k); v != "" {
			roots = append(roots, v)
		}
	}
	if home, _ := lookupEnv("HOME"); home != "" {
		roots = append(roots, filepath.Join(home, ".cache", "huggingface"))
	}
	return roots
}

func loadTokenizerOnce(ctx context.Context, o *tokenizerOptions, repo string, lookupEnv func(string) (string, bool)) (*tokenizer.Tokenizer, string, error) {
	if o.dir != "" {
		dir, err := tokenize.ResolveDir(o.dir, repo, o.revision)
		if err != nil {
			return nil, "", err
		}
		t, err := tokenizer.LoadDir(dir)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", dir, err)
		}
		return t, dir, nil
	}
	// The engines' cache first, as HF does: no download when they have the model already.
	for _, root := range hfCacheRoots(lookupEnv) {
		dir, err := tokenize.ResolveDir(root, repo, o.revision)
		if err != nil {
			continue
		}
		t, err := tokenizer.LoadDir(dir)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", dir, err)
		}
		return t, dir, nil
	}
	if v, _ := lookupEnv("HF_HUB_OFFLINE"); v == "1" || strings.EqualFold(v, "true") {
		return nil, "", errOffline
	}
	token, _ := lookupEnv("HF_TOKEN")
	if token == "" {
		token, _ = lookupEnv("HUGGING_FACE_HUB_TOKEN")
	}
	h := tokenize.Hub{Endpoint: o.hfEndpoint, Repo: repo, Revision: o.revision, Token: strings.TrimSpace(token),
		Client: &http.Client{Transport: http.DefaultTransport}}
	tj, cj, err := h.Fetch(ctx)
	if err != nil {
		return nil, "", err
	}
	t, err := tokenizer.Load(tj, cj)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", h.Origin(), err)
	}
	return t, h.Origin(), nil
}
