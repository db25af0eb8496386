#!/usr/bin/env bash
# Object-store benchmark, side by side in one run against one MinIO on
# loopback (see TestBenchS3 in ../bench_test.go): convert of the small
# replica from a bucket vs the SDK's transfer manager downloading the same
# objects, inspect of a header-only replica from the bucket, peak memory of
# convert from a tiny and from a small replica. Needs MinIO (K3CKPT_MINIO,
# PATH or ~/go/bin) and ~3 GB under TMPDIR.
set -euo pipefail
cd "$(dirname "$0")/../../.."
bin=$(mktemp -d)/k3ckpt
CGO_ENABLED=0 go build -o "$bin" ./cmd/k3ckpt
K3CKPT_S3_BENCH="$bin" go test -count=1 -timeout 30m -run '^TestBenchS3$' -v ./internal/objstore/ | grep -v '^=== '
rm -rf "$(dirname "$bin")"
