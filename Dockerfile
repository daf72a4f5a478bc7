# Tandem's container image: one static binary on a distroless base (no shell,
# no libc, runs as a non-root user).
#
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#                --build-arg COMMIT=$(git rev-parse HEAD) -t tandem:dev .
#
# The build stage's `go build` line is run verbatim by
# cmd/tandem's TestDockerfileBuild (no image can be built on the CI machine),
# which checks that the binary is static and that `tandem version` prints the
# stamped version and commit. Keep the build on one RUN line starting with
# `CGO_ENABLED=0 GOEXPERIMENT=simd go build`: the simd build carries the
# native engine's vector kernels (engine/native/kernels; the portable build
# runs its quantized products several times slower), picked at start-up by
# the CPU's features, with portable code on CPUs without AVX2.
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
# The operator is a Go module of its own (control/operator/go.mod: the
# Kubernetes libraries are its requirements, not the main module's).
COPY control/operator/go.mod control/operator/go.sum ./control/operator/
RUN go mod download && cd control/operator && go mod download
COPY . .
ARG VERSION=unknown
ARG COMMIT=unknown
# -trimpath: no build-machine paths in the binary; -s -w: no symbol table or
# DWARF (a third of the size); CGO_ENABLED=0: static, so the image needs no libc.
RUN CGO_ENABLED=0 GOEXPERIMENT=simd go build -trimpath -buildvcs=false -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/tandem ./cmd/tandem
# The operator is its own binary in its own module (controller-runtime is
# linked into it alone).
RUN cd control/operator && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/tandem-operator ./cmd/tandem-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tandem /tandem
COPY --from=build /out/tandem-operator /tandem-operator
USER nonroot:nonroot
# The frontend's default port; workers' ports are set by their flags.
EXPOSE 8000
ENTRYPOINT ["/tandem"]
CMD ["serve", "--host", "0.0.0.0"]
