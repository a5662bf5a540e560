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
	"fmt"
	"path/filepath"
	"time"

	"github.com/blang/semver/v4"
)

// releasesFile lists the operator's releases (config/manifests/releases.yaml). The CSV's
// createdAt and upgrade edge come from it rather than from the clock or the git history, so that
// `make bundle` writes the same bytes on every machine and on every run.
const releasesFile = "releases.yaml"

// releaseList is config/manifests/releases.yaml.
type releaseList struct {
	Releases []release `json:"releases"`
}

// release is one version of the bundle.
type release struct {
	// Version is the CSV's spec.version.
	Version string `json:"version"`
	// CreatedAt is the CSV's createdAt annotation and the bundle image's
	// org.opencontainers.image.created label: when the release was cut, RFC 3339 in UTC.
	CreatedAt string `json:"createdAt"`
	// SkipRange, when set, is the CSV's olm.skipRange annotation: the versions OLM may upgrade
	// from straight to this one, besides the one it replaces.
	SkipRange string `json:"skipRange,omitempty"`
}

// upgrade is what the CSV of one release says about its place in the channel.
type upgrade struct {
	createdAt string
	// replaces is the CSV name of the previous release, "" for the first.
	replaces  string
	skipRange string
}

// readReleases reads the releases file of manifestsDir and returns the entry of version, with
// the release before it as the one it replaces. Releases are listed newest first, each version
// once; a version the file does not list is refused, so a release cannot ship a bundle without
// a creation date and an upgrade edge.
func readReleases(manifestsDir, pkgName string, version semver.Version) (upgrade, error) {
	path := filepath.Join(manifestsDir, releasesFile)
	var list releaseList
	if err := readStrict(path, &list); err != nil {
		return upgrade{}, err
	}
	if len(list.Releases) == 0 {
		return upgrade{}, fmt.Errorf("%s: no releases", path)
	}
	versions := make([]semver.Version, len(list.Releases))
	for i, r := range list.Releases {
		v, err := semver.Parse(r.Version)
		if err != nil {
			return upgrade{}, fmt.Errorf("%s: release %d: version %q: %w", path, i, r.Version, err)
		}
		if i > 0 && !v.LT(versions[i-1]) {
			return upgrade{}, fmt.Errorf("%s: release %s is listed after %s: list releases newest first, each once", path, v, versions[i-1])
		}
		t, err := time.Parse(time.RFC3339, r.CreatedAt)
		if err != nil || t.Location() != time.UTC {
			return upgrade{}, fmt.Errorf("%s: release %s: createdAt %q must be an RFC 3339 time in UTC, such as 2026-01-31T00:00:00Z", path, v, r.CreatedAt)
		}
		if r.SkipRange != "" {
			if _, err := semver.ParseRange(r.SkipRange); err != nil {
				return upgrade{}, fmt.Errorf("%s: release %s: skipRange %q: %w", path, v, r.SkipRange, err)
			}
		}
		versions[i] = v
	}
	for i, v := range versions {
		if !v.EQ(version) {
			continue
		}
		u := upgrade{createdAt: list.Releases[i].CreatedAt, skipRange: list.Releases[i].SkipRange}
		if i+1 < len(versions) {
			u.replaces = pkgName + ".v" + versions[i+1].String()
		}
		return u, nil
	}
	return upgrade{}, fmt.Errorf("%s lists no release %s: add it (newest first) with its createdAt before building its bundle", path, version)
}
