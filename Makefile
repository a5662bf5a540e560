# kvrouter — see README.md. Every target works offline except for the Go module proxy.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c

K8S_VERSION ?= v1.36.3
BIN ?= $(CURDIR)/bin
ENVTEST_ASSETS ?= $(BIN)/k8s/$(K8S_VERSION)
GO ?= go
TOOLS := $(GO) tool -modfile=hack/tools/go.mod
CONTROLLER_GEN := $(TOOLS) controller-gen
KUSTOMIZE := $(TOOLS) kustomize
GOTEST_FLAGS ?=
# The images of `make deploy`, `make bundle` and `make docker-build`: the operator, the router and
# the simulated engine (Dockerfile stages manager, router, vllm-sim). Empty keeps config/manager's.
IMG ?=
ROUTER_IMG ?=
SIMULATOR_IMG ?=
# `make bundle`: VERSION (semver) replaces the CSV base's spec.version; BUNDLE_IMG is the bundle image.
VERSION ?=
BUNDLE_IMG ?= ghcr.io/kvrouter/kvrouter-operator-bundle:v$(or $(VERSION),0.1.0)
PLATFORMS ?= linux/amd64,linux/arm64
# What `make docker-build` tags when IMG, ROUTER_IMG, SIMULATOR_IMG are empty: config/manager's images.
RELEASE_IMAGES := manager=ghcr.io/kvrouter/manager:v0.1.0 router=ghcr.io/kvrouter/router:v0.1.0 vllm-sim=ghcr.io/kvrouter/vllm-sim:v0.1.0
image-of = $(or $(2),$(patsubst $(1)=%,%,$(filter $(1)=%,$(RELEASE_IMAGES))))
CONTAINER_TOOL ?= docker

.PHONY: all
all: build

##@ Build

.PHONY: build
build: ## Build every binary into bin/.
	$(GO) build -o $(BIN)/ ./cmd/...

.PHONY: run
run: build ## Run the operator against the cluster in your kubeconfig (CRDs must be installed: make install).
	$(BIN)/manager

##@ Generate

.PHONY: generate
generate: ## Regenerate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: ## Regenerate the CRD and RBAC manifests from the Go types and kubebuilder markers.
	$(CONTROLLER_GEN) rbac:roleName=kvrouter-manager crd:generateEmbeddedObjectMeta=false webhook paths=./... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	$(GO) run ./hack/alertrules

.PHONY: docs
docs: ## Regenerate docs/api.md from the API types.
	$(GO) run ./hack/apidocs > docs/api.md

.PHONY: helm
helm: ## Regenerate the Helm chart charts/kvrouter from config/ (VERSION=x.y.z sets its version).
	$(GO) run ./hack/helmchart -version "$(VERSION)"

.PHONY: verify
verify: generate manifests docs bundle helm ## Fail if generated files are stale (changed, added or removed).
	git diff --exit-code -- api config docs/api.md bundle bundle.Dockerfile charts
	@if [[ -n "$$(git status --porcelain -- api config docs/api.md bundle bundle.Dockerfile charts)" ]]; then \
		git status --short -- api config docs/api.md bundle bundle.Dockerfile charts; echo "generated files are not committed"; exit 1; fi

##@ Test

.PHONY: envtest
envtest: ## Build kube-apiserver and etcd for envtest from the Go module proxy (cached in bin/k8s).
	K8S_VERSION=$(K8S_VERSION) hack/build-envtest.sh $(ENVTEST_ASSETS)

# A KUBEBUILDER_ASSETS already in the environment (a directory with your own kube-apiserver and
# etcd) is used as is and nothing is built; without one, make envtest builds them into bin/k8s.
ifdef KUBEBUILDER_ASSETS
TEST_ASSETS := $(KUBEBUILDER_ASSETS)
TEST_ASSETS_DEP := envtest-given
else
TEST_ASSETS := $(ENVTEST_ASSETS)
TEST_ASSETS_DEP := envtest
endif

.PHONY: envtest-given
envtest-given: ## Check that the KUBEBUILDER_ASSETS from the environment holds kube-apiserver and etcd.
	@for b in kube-apiserver etcd; do test -x "$(TEST_ASSETS)/$$b" || { echo "KUBEBUILDER_ASSETS=$(TEST_ASSETS) has no executable $$b (unset KUBEBUILDER_ASSETS to build them: make envtest)" >&2; exit 1; }; done

.PHONY: test
test: $(TEST_ASSETS_DEP) ## Run unit and envtest suites (KUBEBUILDER_ASSETS from the environment, else bin/k8s).
	KUBEBUILDER_ASSETS=$(TEST_ASSETS) $(GO) test $(GOTEST_FLAGS) ./...

.PHONY: test-unit
test-unit: ## Run the tests that need no control plane (envtest suites are named TestEnvtest*).
	$(GO) test $(GOTEST_FLAGS) -skip '^TestEnvtest' ./...

PROMTOOL := $(GO) tool -modfile=hack/promtool/go.mod promtool

.PHONY: test-alerts
test-alerts: ## Check the shipped alerting rules and run their unit tests (test/alerts) with promtool (pinned in hack/promtool/go.mod).
	$(PROMTOOL) check rules config/prometheus/rules/kvrouter.rules.yaml
	$(PROMTOOL) test rules test/alerts/*.yaml

.PHONY: lint
lint: ## go vet and staticcheck (pinned in hack/lint/go.mod; checks chosen in staticcheck.conf).
	$(GO) vet ./...
	$(GO) tool -modfile=hack/lint/go.mod staticcheck ./...

.PHONY: test-operator
test-operator: $(TEST_ASSETS_DEP) ## Run the operator's tests: the envtest suite (real kube-apiserver + Gateway API, KEDA, LWS CRDs) and the manager.
	KUBEBUILDER_ASSETS=$(TEST_ASSETS) $(GO) test $(GOTEST_FLAGS) ./internal/operator/controller/... ./cmd/manager/...

SOAK ?= 10m
CHURN ?= 60s

.PHONY: soak
soak: ## Long reliability run: the soak ($(SOAK) at 20 req/s) and endpoint churn ($(CHURN)) through the router (docs/reliability.md).
	KVROUTER_SOAK=$(SOAK) KVROUTER_CHURN=$(CHURN) $(GO) test -count=1 -timeout 60m -v -run '^(TestSoak|TestEndpointChurn)$$' ./test/reliability

.PHONY: kustomize-build
kustomize-build: ## Render config/default (what `kubectl kustomize config/default` prints).
	$(KUSTOMIZE) build config/default

##@ Demo and benchmarks

.PHONY: demo
demo: ## Run 4 simulated engines behind the router; compare round-robin with kvrouter live (out/demo/).
	hack/demo.sh

BENCH_WORKLOADS ?= $(wildcard bench/workloads/*.yaml)
BENCH_OUT ?= out/bench
TRACES ?= bench/traces

.PHONY: bench
bench: ## Simulate every workload in bench/workloads through every policy (out/bench/).
	$(GO) build -o $(BIN)/ ./cmd/kvbench
	$(BIN)/kvbench simulate --traces $(TRACES) --out $(BENCH_OUT) $(BENCH_WORKLOADS)

PD_POLICIES ?= kvrouter,kvrouter-pd,kvrouter-pd-always,kvrouter-pd-threshold,dynamo-pd,llmd-pd,prodstack-pd,round-robin

.PHONY: bench-pd
bench-pd: ## Simulate the disaggregated (P/D) workloads bench/workloads/pd-*.yaml with kvrouter's and the peers' P/D policies (out/bench/).
	$(GO) build -o $(BIN)/ ./cmd/kvbench
	$(BIN)/kvbench simulate --policies $(PD_POLICIES) --out $(BENCH_OUT) $(wildcard bench/workloads/pd-*.yaml)

.PHONY: bench-matrix
bench-matrix: ## Every workload x every rate through kvrouter, round-robin and every peer variant, SEEDS=5 seeds (out/matrix/, about an hour), then the verdict against each peer's best variant (docs/kvbench.md).
	hack/bench-matrix.sh

# ARGS for bench-compare: -quick (seconds; what CI runs), -rounds N, -block-sizes 16,64, -workloads shared,disjoint,hot.
ARGS ?=

.PHONY: bench-compare
bench-compare: ## kvrouter's prefix index against llm-d's in-memory kvblock index, same events and lookups (internal/bench/compare, a module of its own; docs/benchmarks.md).
	cd internal/bench/compare && CGO_ENABLED=0 $(GO) run . $(ARGS)

##@ OLM bundle and images

.PHONY: bundle
bundle: ## Regenerate bundle/ and bundle.Dockerfile from config/ (VERSION=x.y.z, IMG/ROUTER_IMG/SIMULATOR_IMG for a release).
	@if [[ -z "$(IMG)$(ROUTER_IMG)$(SIMULATOR_IMG)" ]]; then \
		$(GO) run ./hack/bundle -version "$(VERSION)"; \
	else $(with-images) $(GO) run ./hack/bundle -config "$$cfg" -version "$(VERSION)"; fi

.PHONY: bundle-build
bundle-build: ## Build the bundle image BUNDLE_IMG with docker (CONTAINER_TOOL=podman for podman); then push it.
	$(CONTAINER_TOOL) build --build-arg REVISION=$(shell git rev-parse HEAD 2>/dev/null || echo unknown) -f bundle.Dockerfile -t $(BUNDLE_IMG) .

.PHONY: image-check
image-check: ## Build the binaries with the Dockerfile's build line and check they are static (test/images; no container engine needed).
	KVROUTER_STATIC_BUILD=1 $(GO) test -count=1 ./test/images

# The OCI labels' build arguments: the release, the commit, and the commit's time (not the clock's).
OCI_ARGS = --build-arg VERSION=$(or $(VERSION),dev) --build-arg REVISION=$(shell git rev-parse HEAD 2>/dev/null || echo unknown) \
	--build-arg CREATED=$(shell git log -1 --format=%cI 2>/dev/null || echo unknown)

.PHONY: docker-build
docker-build: ## Build the three images (Dockerfile stages manager, router, vllm-sim) for this machine's platform.
	$(CONTAINER_TOOL) build $(OCI_ARGS) --target manager -t $(call image-of,manager,$(IMG)) .
	$(CONTAINER_TOOL) build $(OCI_ARGS) --target router -t $(call image-of,router,$(ROUTER_IMG)) .
	$(CONTAINER_TOOL) build $(OCI_ARGS) --target vllm-sim -t $(call image-of,vllm-sim,$(SIMULATOR_IMG)) .

.PHONY: docker-buildx
docker-buildx: ## Build and push the three images for PLATFORMS (default linux/amd64,linux/arm64) with docker buildx.
	docker buildx build $(OCI_ARGS) --push --platform $(PLATFORMS) --target manager -t $(call image-of,manager,$(IMG)) .
	docker buildx build $(OCI_ARGS) --push --platform $(PLATFORMS) --target router -t $(call image-of,router,$(ROUTER_IMG)) .
	docker buildx build $(OCI_ARGS) --push --platform $(PLATFORMS) --target vllm-sim -t $(call image-of,vllm-sim,$(SIMULATOR_IMG)) .

##@ Deploy

.PHONY: install
install: ## Install the CRD into the cluster in your kubeconfig.
	$(KUSTOMIZE) build config/crd | kubectl apply --server-side -f -

.PHONY: deploy
deploy: ## Deploy the operator into the cluster in your kubeconfig (IMG, ROUTER_IMG, SIMULATOR_IMG choose the images).
	$(MAKE) -s deploy-manifests | kubectl apply --server-side -f -

.PHONY: deploy-manifests
deploy-manifests: ## Print what `make deploy` applies (IMG, ROUTER_IMG, SIMULATOR_IMG=repo:tag or repo@sha256:... set the images).
	@$(with-images) $(BIN)/kustomize build "$$cfg/default"

# with-images: a copy of config/ in $$cfg with IMG, ROUTER_IMG and SIMULATOR_IMG set in
# config/manager (kustomize edit set image), removed when the recipe line ends.
define with-images
$(GO) build -modfile=hack/tools/go.mod -o $(BIN)/kustomize sigs.k8s.io/kustomize/kustomize/v5; \
tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; cp -r config "$$tmp/"; cfg="$$tmp/config"; \
for image in manager=$(IMG) router=$(ROUTER_IMG) vllm-sim=$(SIMULATOR_IMG); do \
	if [[ -n "$${image#*=}" ]]; then (cd "$$cfg/manager" && $(BIN)/kustomize edit set image "$$image"); fi; \
done;
endef

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)
