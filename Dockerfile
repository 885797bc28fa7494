# syntax=docker/dockerfile:1
# The webhook image: a static Go binary on distroless, running as a non-root
# user with nothing else in the image (no shell, no package manager).
#
#   make image        # = docker build --build-arg VERSION=... --build-arg COMMIT=... -t clusterip-policy:$(VERSION) .
#
# The cache mounts need BuildKit (the default builder of current Docker).

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Declared here, not above, so a new version does not invalidate the module cache layer.
ARG VERSION=dev
ARG COMMIT=unknown
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/clusterip-policy ./cmd/webhook

# distroless/static: CA certificates, tzdata and /etc/passwd with the nonroot
# user (65532), no libc needed by a CGO_ENABLED=0 binary.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/clusterip-policy /clusterip-policy
# Numeric, so the kubelet can check runAsNonRoot without reading /etc/passwd.
USER 65532:65532
ENTRYPOINT ["/clusterip-policy"]
