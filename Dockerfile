# k3ckpt container image: a static binary on an empty base (no shell, no
# package manager), running as an unprivileged user.
#
#   docker build -t k3ckpt:latest .        (or: podman build / buildah bud)
#   docker run --rm -v /data:/data k3ckpt:latest inspect /data/Kimi-K3
#
# The build stage compiles exactly what scripts/release.sh compiles for
# linux (CGO_ENABLED=0, -trimpath, no build ID). The VCS revision is stamped
# when the context holds the repository's .git directory (a clone, not a
# worktree); `k3ckpt version` says what it got.
ARG GO_VERSION=1.26

FROM docker.io/library/golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} GOFLAGS=-buildvcs=auto \
    go build -trimpath -ldflags="-s -w -buildid=" -o /out/k3ckpt ./cmd/k3ckpt \
 && /out/k3ckpt version \
 && mkdir -p /out/tmp && chmod 1777 /out/tmp

FROM scratch
# CA certificates for inspect of https:// checkpoints; /tmp for the demo.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/tmp /tmp
COPY --from=build /out/k3ckpt /usr/local/bin/k3ckpt
USER 65532:65532
ENV TMPDIR=/tmp
ENTRYPOINT ["/usr/local/bin/k3ckpt"]
CMD ["--help"]
