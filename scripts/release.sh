#!/usr/bin/env bash
# Reproducible release build of the k3ckpt binary: static (CGO_ENABLED=0),
# -trimpath, no build ID, the VCS revision stamped by the go command, for
# linux/amd64, linux/arm64 and darwin/arm64 (TARGETS overrides the list).
# The same commit and Go version give the same bytes; SHA256SUMS lists them.
# It builds a fresh clone of HEAD, so uncommitted changes never reach a
# release and the VCS stamp is always there (the go command does not stamp
# builds inside a git worktree, whose .git is a file).
#
#   scripts/release.sh [OUTDIR]        default: dist/
#   scripts/release.sh --check [OUTDIR]  build twice and compare the bytes
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
out="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
targets="${TARGETS:-linux/amd64 linux/arm64 darwin/arm64}"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "note: uncommitted changes are not part of the release (it builds HEAD $(git rev-parse --short HEAD))" >&2
fi
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git clone -q --no-checkout "$(pwd)" "$src/k3ckpt"
git -C "$src/k3ckpt" checkout -q "$(git rev-parse HEAD)"
cd "$src/k3ckpt"
rev=$(git rev-parse HEAD) # also linked in, for a version line that never lacks it

build() { # build DIR: every target into DIR; prints the failures
  local dir="$1" failed=""
  mkdir -p "$dir"
  for t in $targets; do
    local os="${t%/*}" arch="${t#*/}"
    local bin="$dir/k3ckpt-$os-$arch"
    if CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" GOFLAGS=-buildvcs=true \
        go build -trimpath -ldflags="-s -w -buildid= -X main.revision=$rev" -o "$bin" ./cmd/k3ckpt 2>"$dir/.err-$os-$arch"; then
      rm -f "$dir/.err-$os-$arch"
    else
      failed="$failed $t"
      echo "build $t failed:" >&2
      sed 's/^/  /' "$dir/.err-$os-$arch" >&2
      rm -f "$dir/.err-$os-$arch"
    fi
  done
  (cd "$dir" && sha256sum k3ckpt-* > SHA256SUMS 2>/dev/null || true)
  echo "$failed"
}

failed=$(build "$out")
cat "$out/SHA256SUMS"
if [ "$check" = 1 ]; then
  again="$src/again"
  build "$again" >/dev/null
  if cmp -s "$out/SHA256SUMS" "$again/SHA256SUMS"; then
    echo "reproducible: a second build gave the same bytes"
  else
    echo "NOT reproducible:" >&2
    diff "$out/SHA256SUMS" "$again/SHA256SUMS" >&2 || true
    exit 1
  fi
fi
if [ -n "${failed// /}" ]; then
  echo "targets that did not build:$failed" >&2
  exit 1
fi
