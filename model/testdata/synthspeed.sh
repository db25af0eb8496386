#!/usr/bin/env bash
# Side-by-side synth speed: OLD and NEW k3ckpt binaries write the same
# replica in turn (ROUNDS times each, alternating), and the script prints
# each run's MB/s of wall time and of CPU time (user + sys: what a busy
# machine does not distort), the NEW/OLD ratios of the medians, and checks
# that both wrote the same bytes.
#
#   model/testdata/synthspeed.sh OLD NEW [SYNTH-ARGS...]   default: --scale small
#   ROUNDS=3 TMP=/tmp/x model/testdata/synthspeed.sh /tmp/k3-main /tmp/k3-new --config cfg.json
#
# Build OLD from the revision to compare with, e.g.
#   git worktree add /tmp/k3-base main && CGO_ENABLED=0 go build -C /tmp/k3-base -o /tmp/k3-main ./cmd/k3ckpt
set -euo pipefail
old=$1 new=$2
shift 2
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--scale small)
rounds=${ROUNDS:-3}
tmp=${TMP:-$(mktemp -d)}
mkdir -p "$tmp"
trap 'rm -rf "$tmp"/old "$tmp"/new' EXIT
declare -A wall cpu
for r in $(seq "$rounds"); do
  for which in old new; do
    bin=$old; [ $which = new ] && bin=$new
    rm -rf "${tmp:?}/$which"
    t=$( { /usr/bin/time -f "%e %U %S" "$bin" synth "$tmp/$which" "${args[@]}" -q; } 2>&1 >/dev/null | tail -1)
    bytes=$(du -sb --apparent-size "$tmp/$which" | cut -f1)
    read -r e u s <<<"$t"
    w=$(awk -v b="$bytes" -v e="$e" 'BEGIN{printf "%.1f", b/e/1e6}')
    c=$(awk -v b="$bytes" -v u="$u" -v s="$s" 'BEGIN{printf "%.1f", b/(u+s)/1e6}')
    echo "round $r $which: $bytes bytes, ${e}s wall (${w} MB/s), ${u}s user + ${s}s sys (${c} MB per CPU-second)"
    wall[$which]+="$w "; cpu[$which]+="$c "
  done
  if [ "$r" = 1 ]; then
    if diff <(cd "$tmp/old" && sha256sum ./* | sort) <(cd "$tmp/new" && sha256sum ./* | sort) >/dev/null; then
      echo "same bytes: every file of the two replicas has the same sha256"
    else
      echo "DIFFERENT BYTES between old and new" >&2; exit 1
    fi
  fi
done
med() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
for k in wall cpu; do
  declare -n m=$k
  o=$(echo "${m[old]}" | med) n=$(echo "${m[new]}" | med)
  awk -v k=$k -v o="$o" -v n="$n" 'BEGIN{printf "median %s MB/s: old %.1f, new %.1f, new/old %.2fx\n", k, o, n, n/o}'
done
