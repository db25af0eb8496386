#!/usr/bin/env bash
# Object-store benchmarks, side by side in one run against one MinIO on
# loopback. TestBenchS3 (../bench_test.go): convert of the small replica
# from a bucket vs the SDK's transfer manager copying the same objects.
# TestBenchS3Scaling (../scaling_test.go): inspect of the full-size
# header-only replica from a bucket (headers stored, real sizes reported by
# a proxy; see its doc), and the peak memory of convert and shard s3 -> s3
# of three replicas: small, tall (8x larger objects, same tensors) and wide
# (larger tensors). Needs MinIO (K3CKPT_MINIO, PATH or ~/go/bin) and ~12 GB
# under TMPDIR.
#
#   bench.sh              both
#   bench.sh copy         TestBenchS3 only
#   bench.sh scaling      TestBenchS3Scaling only (K3CKPT_S3_BENCH_PART=inspect|memory: one half;
#                         K3CKPT_S3_BENCH_BASE=BINARY: a baseline build's memory rows beside)
set -euo pipefail
cd "$(dirname "$0")/../../.."
case "${1:-}" in
copy) run='^TestBenchS3$' ;;
scaling) run='^TestBenchS3Scaling$' ;;
*) run='^TestBenchS3(Scaling)?$' ;;
esac
bin=$(mktemp -d)/k3ckpt
CGO_ENABLED=0 go build -o "$bin" ./cmd/k3ckpt
K3CKPT_S3_BENCH="$bin" go test -count=1 -timeout 60m -run "$run" -v ./internal/objstore/ | grep -v '^=== '
rm -rf "$(dirname "$bin")"
