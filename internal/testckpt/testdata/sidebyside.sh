#!/usr/bin/env bash
# Test time of two revisions side by side, so that both see the same load:
#
#	internal/testckpt/testdata/sidebyside.sh REV PKG [test flags]
#
# builds PKG's test binary from REV (git archive into a temporary
# directory) and from the working tree, runs both at once (each in its
# package directory, -test.count=1 -test.v plus the flags given, e.g.
# -test.short), and prints each run's wall and CPU seconds, then the
# slowest tests: seconds at REV, seconds in the working tree, name.
# With PKG "all" it runs `go test -count=1 [flags] ./...` in both trees at
# once instead (flags as go test takes them, e.g. -short), after building
# both trees' test binaries once untimed.
set -euo pipefail
rev=$1 pkg=$2
shift 2
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/base"
git -C "$root" archive "$rev" | tar -x -C "$tmp/base"
dirs=("$tmp/base" "$root")
if [ "$pkg" = all ]; then
  # Build (and cache) both trees' packages and test binaries first, so the
  # figures compare the tests, not a cold build against a warm one.
  for i in 0 1; do (cd "${dirs[$i]}" && go test -count=1 -run '^$' ./... >/dev/null); done
  for i in 0 1; do
    (cd "${dirs[$i]}" && /usr/bin/time -f "side $i: %e s wall, %U s user, %S s sys" go test -count=1 "$@" ./... >"$tmp/out$i" 2>&1; echo "side $i exit $?" >>"$tmp/out$i") &
  done
  wait
  echo "side 0: $rev, side 1: working tree"
  grep -h "^side\|^FAIL\|^---.FAIL" "$tmp/out0" "$tmp/out1"
  exit 0
fi
for i in 0 1; do
  (cd "${dirs[$i]}" && go test -c -o "$tmp/t$i.test" "./$pkg")
done
for i in 0 1; do
  (cd "${dirs[$i]}/$pkg" && /usr/bin/time -f "side $i: %e s wall, %U s user, %S s sys" "$tmp/t$i.test" -test.count=1 -test.v "$@" >"$tmp/out$i" 2>&1; echo "side $i exit $?" >>"$tmp/out$i") &
done
wait
echo "side 0: $rev, side 1: working tree"
grep -h "^side" "$tmp/out0" "$tmp/out1"
python3 - "$tmp/out0" "$tmp/out1" <<'PY'
import re, sys
def read(p):
    d = {}
    for l in open(p):
        m = re.match(r'^--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)', l)
        if m and '/' not in m.group(2):
            d[m.group(2)] = (float(m.group(3)), m.group(1))
    return d
a, b = read(sys.argv[1]), read(sys.argv[2])
print("failed in the working tree:", [k for k, v in b.items() if v[1] == 'FAIL'] or "none")
for k in sorted(set(a) | set(b), key=lambda k: -max(a.get(k, (0,))[0], b.get(k, (0,))[0]))[:20]:
    print(f"{a.get(k, (0,))[0]:8.2f} {b.get(k, (0,))[0]:8.2f}  {k}")
PY
