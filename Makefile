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
# IMG overrides the operator (and router) image in `make deploy`; empty keeps config/manager's.
IMG ?=

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

.PHONY: docs
docs: ## Regenerate docs/api.md from the API types.
	$(GO) run ./hack/apidocs > docs/api.md

.PHONY: verify
verify: generate manifests docs ## Fail if generated files are stale.
	git diff --exit-code -- api config docs/api.md

##@ Test

.PHONY: envtest
envtest: ## Build kube-apiserver and etcd for envtest from the Go module proxy (cached in bin/k8s).
	K8S_VERSION=$(K8S_VERSION) hack/build-envtest.sh $(ENVTEST_ASSETS)

.PHONY: test
test: envtest ## Run unit and envtest suites.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test $(GOTEST_FLAGS) ./...

.PHONY: test-unit
test-unit: ## Run the tests that need no control plane (envtest suites are named TestEnvtest*).
	$(GO) test $(GOTEST_FLAGS) -skip '^TestEnvtest' $$($(GO) list ./... | grep -v /test/envtest)

.PHONY: test-operator
test-operator: envtest ## Run the operator's tests: the envtest suite (real kube-apiserver + Gateway API, KEDA, LWS CRDs) and the manager.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test $(GOTEST_FLAGS) ./internal/controller/... ./cmd/manager/...

.PHONY: kustomize-build
kustomize-build: ## Render config/default (what `kubectl kustomize config/default` prints).
	$(KUSTOMIZE) build config/default

##@ Demo and benchmarks

.PHONY: demo
demo: ## Run 4 simulated engines behind the router; compare round-robin with kvrouter live (out/demo/).
	hack/demo.sh

BENCH_WORKLOADS ?= $(wildcard bench/workloads/*.yaml)
BENCH_OUT ?= out/bench
TRACES ?= ../shared/traces

.PHONY: bench
bench: ## Simulate every workload in bench/workloads through every policy (out/bench/).
	$(GO) build -o $(BIN)/ ./cmd/kvbench
	$(BIN)/kvbench simulate --traces $(TRACES) --out $(BENCH_OUT) $(BENCH_WORKLOADS)

##@ Deploy

.PHONY: install
install: ## Install the CRD into the cluster in your kubeconfig.
	$(KUSTOMIZE) build config/crd | kubectl apply --server-side -f -

.PHONY: deploy
deploy: ## Deploy the operator into the cluster in your kubeconfig (IMG=repo:tag to choose the image).
	$(MAKE) -s deploy-manifests | kubectl apply --server-side -f -

.PHONY: deploy-manifests
deploy-manifests: ## Print what `make deploy` applies (IMG=repo:tag sets the operator and router image).
	@$(GO) build -modfile=hack/tools/go.mod -o $(BIN)/kustomize sigs.k8s.io/kustomize/kustomize/v5
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; cp -r config "$$tmp/"; \
	if [[ -n "$(IMG)" ]]; then (cd "$$tmp/config/manager" && $(BIN)/kustomize edit set image kvrouter=$(IMG)); fi; \
	$(BIN)/kustomize build "$$tmp/config/default"

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)
