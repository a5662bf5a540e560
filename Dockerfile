# One build stage, one image per binary. Build each image by its stage name:
#   docker build --target manager  -t ghcr.io/kvrouter/manager:v0.1.0  .
#   docker build --target router   -t ghcr.io/kvrouter/router:v0.1.0   .
#   docker build --target vllm-sim -t ghcr.io/kvrouter/vllm-sim:v0.1.0 .
# (`make docker-build` runs all three; a plain `docker build .` gives the manager, the last stage.)
# The operator pulls only what a pod runs: router pods (scaled with the engines) carry the router
# alone, not the operator's Kubernetes client. The names match config/manager's images, which
# reach the manager as RELATED_IMAGE_ROUTER and RELATED_IMAGE_SIMULATOR.
#
# The binaries are static (CGO_ENABLED=0; the libzmq KV-event transport is behind the `libzmq`
# build tag, which is not set here: the pure-Go ZMQ transport is used), so the final stages are
# distroless/static: no shell, no package manager, no libc. Nothing runs in them at build time.
# test/images checks all of this.
#
# OCI labels: VERSION, REVISION (the git commit) and CREATED (the commit's time, so that a
# rebuild of one commit labels alike) are build arguments; `make docker-build` passes them.
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=unknown

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w" -o /out/ ./cmd/manager ./cmd/router ./cmd/vllm-sim

# USER is numeric, so the kubelet can check runAsNonRoot without a runAsUser in the pod; OpenShift's
# restricted-v2 SCC replaces the UID with one from the namespace's range, which works as well: the
# binaries need no writable path in the image (their pods run with a read-only root filesystem).
FROM gcr.io/distroless/static:nonroot AS router
ARG VERSION
ARG REVISION
ARG CREATED
LABEL org.opencontainers.image.title="kvrouter router" \
      org.opencontainers.image.description="KV-cache-aware router for vLLM engines" \
      org.opencontainers.image.source="https://github.com/kvrouter/kvrouter" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version=$VERSION \
      org.opencontainers.image.revision=$REVISION \
      org.opencontainers.image.created=$CREATED
COPY --from=build /out/router /router
USER 65532:65532
ENTRYPOINT ["/router"]

FROM gcr.io/distroless/static:nonroot AS vllm-sim
ARG VERSION
ARG REVISION
ARG CREATED
LABEL org.opencontainers.image.title="kvrouter vllm-sim" \
      org.opencontainers.image.description="vLLM simulator: the same HTTP API, metrics and KV events, no GPU" \
      org.opencontainers.image.source="https://github.com/kvrouter/kvrouter" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version=$VERSION \
      org.opencontainers.image.revision=$REVISION \
      org.opencontainers.image.created=$CREATED
COPY --from=build /out/vllm-sim /vllm-sim
USER 65532:65532
ENTRYPOINT ["/vllm-sim"]

FROM gcr.io/distroless/static:nonroot AS manager
ARG VERSION
ARG REVISION
ARG CREATED
LABEL org.opencontainers.image.title="kvrouter operator" \
      org.opencontainers.image.description="Kubernetes operator that serves a model on vLLM replicas behind the kvrouter router" \
      org.opencontainers.image.source="https://github.com/kvrouter/kvrouter" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version=$VERSION \
      org.opencontainers.image.revision=$REVISION \
      org.opencontainers.image.created=$CREATED
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
