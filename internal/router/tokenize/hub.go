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

package tokenize

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// The files the router's in-process tokenizer is built from.
const (
	TokenizerFile       = "tokenizer.json"
	TokenizerConfigFile = "tokenizer_config.json"
)

// Hub downloads a model's tokenizer files from the Hugging Face Hub (or a mirror speaking its
// API), as the engines download the model: GET {Endpoint}/{Repo}/resolve/{Revision}/{file} with
// the HF token the engines use, when there is one.
type Hub struct {
	Endpoint string // default https://huggingface.co
	Repo     string // e.g. meta-llama/Llama-3.1-8B-Instruct
	Revision string // default main
	// Token is sent as a bearer token; it never appears in an error.
	Token  string
	Client *http.Client
	// Timeout bounds one file's download (default 1 min); MaxBytes its size (default 64 MiB:
	// the largest tokenizer.json files are a few tens of MiB).
	Timeout  time.Duration
	MaxBytes int64
}

// ErrHubDenied is a 401 or 403 from the Hub: a gated or private repository without a token, or
// a token that may not read it.
var ErrHubDenied = errors.New("hub refused access")

// ErrHubNotFound is a 404: no such repository, revision or file.
var ErrHubNotFound = errors.New("not found on the hub")

// Origin names what Fetch downloads, for status and logs.
func (h Hub) Origin() string { return "hub:" + h.Repo + "@" + h.revision() }

func (h Hub) revision() string {
	if h.Revision == "" {
		return "main"
	}
	return h.Revision
}

// Fetch downloads tokenizer.json and tokenizer_config.json; the second is optional (nil when the
// repository has none).
func (h Hub) Fetch(ctx context.Context) (tokenizerJSON, configJSON []byte, err error) {
	if h.Repo == "" {
		return nil, nil, errors.New("no model repository to download the tokenizer from")
	}
	if tokenizerJSON, err = h.file(ctx, TokenizerFile); err != nil {
		return nil, nil, err
	}
	configJSON, err = h.file(ctx, TokenizerConfigFile)
	if errors.Is(err, ErrHubNotFound) {
		configJSON, err = nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	// Recent repositories keep the chat template in a file of its own, which takes precedence.
	tmpl, err := h.file(ctx, tokenizer.ChatTemplateFile)
	switch {
	case errors.Is(err, ErrHubNotFound):
	case err != nil:
		return nil, nil, err
	default:
		if configJSON, err = tokenizer.WithChatTemplate(configJSON, tmpl); err != nil {
			return nil, nil, err
		}
	}
	return tokenizerJSON, configJSON, nil
}

func (h Hub) file(ctx context.Context, name string) ([]byte, error) {
	endpoint := strings.TrimRight(h.Endpoint, "/")
	if endpoint == "" {
		endpoint = "https://huggingface.co"
	}
	var segs []string
	for _, s := range strings.Split(h.Repo, "/") {
		segs = append(segs, url.PathEscape(s))
	}
	u := endpoint + "/" + strings.Join(segs, "/") + "/resolve/" + url.PathEscape(h.revision()) + "/" + name
	timeout, limit := h.Timeout, h.MaxBytes
	if timeout <= 0 {
		timeout = time.Minute
	}
	if limit <= 0 {
		limit = 64 << 20
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", name, err)
	}
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
	base := h.Client
	if base == nil {
		base = http.DefaultClient
	}
	// Go's client keeps Authorization on a redirect to a subdomain of the Hub's host; the token is
	// for the Hub alone (its CDN URLs are signed), so any other host gets none.
	client := *base
	client.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		if r.URL.Host != via[0].URL.Host {
			r.Header.Del("Authorization")
		}
		return nil
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("download %s from %s: %w", name, endpoint, scrub(err, h.Token))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		hint := "the repository is gated or private: give the router the engines' HF token (HF_TOKEN)"
		if h.Token != "" {
			hint = "the HF token was refused or may not read this repository"
		}
		return nil, fmt.Errorf("%w: %s answered %s for %s/%s (%s)", ErrHubDenied, endpoint, resp.Status, h.Repo, name, hint)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: %s answered %s for %s/%s at revision %s", ErrHubNotFound, endpoint, resp.Status, h.Repo, name, h.revision())
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("download %s/%s: %s answered %s", h.Repo, name, endpoint, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("download %s/%s: %w", h.Repo, name, scrub(err, h.Token))
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("download %s/%s: larger than %d bytes", h.Repo, name, limit)
	}
	return b, nil
}

// scrub keeps a token out of an error's text, should a transport ever quote a request.
func scrub(err error, token string) error {
	if token == "" || !strings.Contains(err.Error(), token) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), token, "[token]"))
}

// ResolveDir finds the directory holding tokenizer.json under dir: dir itself (a model
// directory, or a snapshot of the HF cache), or the snapshot of repo in an HF cache rooted at dir
// or dir/hub (the model cache volume the engines download into): the one refs/revision names,
// else the newest one holding the file.
func ResolveDir(dir, repo, revision string) (string, error) {
	if fileExists(filepath.Join(dir, TokenizerFile)) {
		return dir, nil
	}
	if repo != "" {
		if revision == "" {
			revision = "main"
		}
		if strings.Contains(repo, "..") || strings.Contains(revision, "..") || strings.HasPrefix(revision, "/") {
			return "", fmt.Errorf("repository %q or revision %q names a path outside the cache", repo, revision)
		}
		name := "models--" + strings.ReplaceAll(repo, "/", "--")
		for _, root := range []string{dir, filepath.Join(dir, "hub")} {
			m := filepath.Join(root, name)
			// A snapshot counts once tokenizer_config.json is there too: the engines download
			// the files side by side, and a tokenizer read before its config would lack the chat
			// template for good.
			ready := func(snap string) bool {
				return fileExists(filepath.Join(snap, TokenizerFile)) && fileExists(filepath.Join(snap, TokenizerConfigFile))
			}
			if ref, err := os.ReadFile(filepath.Join(m, "refs", revision)); err == nil {
				commit := strings.TrimSpace(string(ref))
				if snap := filepath.Join(m, "snapshots", commit); !strings.ContainsAny(commit, `/\`) && commit != ".." && ready(snap) {
					return snap, nil
				}
			}
			// A revision given as a commit has a snapshot of that name and no ref.
			if snap := filepath.Join(m, "snapshots", revision); ready(snap) {
				return snap, nil
			}
			if revision != "main" {
				continue // a revision asked for by name is that one or none
			}
			snaps, _ := filepath.Glob(filepath.Join(m, "snapshots", "*", TokenizerFile))
			snaps = slices.DeleteFunc(snaps, func(f string) bool { return !ready(filepath.Dir(f)) })
			if len(snaps) > 0 {
				sort.Slice(snaps, func(i, j int) bool { return modTime(snaps[i]).After(modTime(snaps[j])) })
				return filepath.Dir(snaps[0]), nil
			}
		}
	}
	return "", fmt.Errorf("%w: no %s in %s, nor in an HF cache there for %q", os.ErrNotExist, TokenizerFile, dir, repo)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func modTime(p string) time.Time {
	st, err := os.Stat(p)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}
