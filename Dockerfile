# One image holds every kvrouter binary: the operator (/manager), the router (/router), the
# simulated engine (/vllm-sim, run when spec.simulate is true) and the benchmark tool (/kvbench).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
ARG TARGETOS=linux TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w" -o /out/ ./cmd/...

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/ /
# No fixed UID beyond distroless' nonroot default: OpenShift's restricted-v2 assigns its own.
USER 65532:65532
ENTRYPOINT ["/manager"]
