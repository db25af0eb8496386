#!/usr/bin/env python3
"""Side-by-side figure for `k3ckpt inspect`: wall time and peak RSS against the
minimal Python ledger (json_loads.py --index: json.loads of the index and of
every header), measured in one run, alternating the two, so that both see the
same machine load.

Usage: ledger_vs_inspect.py K3CKPT DIR [ROUNDS] [-- INSPECT ARGS...]

K3CKPT is the k3ckpt binary (go build -o /tmp/k3ckpt ./cmd/k3ckpt), DIR a
checkpoint such as the full-size header-only replica
(k3ckpt synth /tmp/k3full --scale full --header-only). Each round runs the
ledger once and `k3ckpt inspect DIR` once, each under /usr/bin/time -v (wall
clock and maximum resident set size of the process, interpreter start
included), in alternating order. It prints every round, then the medians and
the median of the per-round ratios (inspect / ledger): the issue's targets are
a wall ratio of at most 0.2 and a peak-RSS ratio below 1. CPU time (user +
system) is printed too: on a shared machine it moves less with the load than
wall time does. The 1-minute load average before and after is printed.
"""
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def measure(cmd):
    """Runs cmd under /usr/bin/time -v; returns (wall seconds, peak RSS MiB,
    CPU seconds: user + system)."""
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", p.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    if not wall or not rss:
        sys.exit(f"cannot read /usr/bin/time -v output:\n{p.stderr}")
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", p.stderr))
    h, m, s = wall.groups()
    return int(h or 0) * 3600 + int(m) * 60 + float(s), int(rss.group(1)) / 1024, cpu


def load():
    return os.getloadavg()[0]


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        i = args.index("--")
        args, extra = args[:i], args[i + 1:]
    if len(args) < 2:
        sys.exit(__doc__)
    k3ckpt, d = args[0], args[1]
    rounds = int(args[2]) if len(args) > 2 else 5
    ledger = [sys.executable, os.path.join(HERE, "json_loads.py"), d, "1", "--index"]
    inspect = [k3ckpt, "inspect", d] + extra
    # One unmeasured run of each warms the page cache.
    measure(ledger)
    measure(inspect)
    load0 = load()
    rows = []
    for r in range(rounds):
        pair = [("ledger", ledger), ("inspect", inspect)]
        if r % 2:
            pair.reverse()
        got = {name: measure(cmd) for name, cmd in pair}
        rows.append(got)
        lw, lr, lc = got["ledger"]
        iw, ir, ic = got["inspect"]
        print(f"round {r + 1}: ledger {lw:.2f} s {lr:.0f} MiB   inspect {iw:.2f} s {ir:.0f} MiB   "
              f"ratio wall {iw / lw:.3f} rss {ir / lr:.3f} cpu {ic / lc:.3f}")
    load1 = load()

    def med(f):
        return statistics.median(f(g) for g in rows)

    print(f"median over {rounds} rounds (load average {load0:.1f} before, {load1:.1f} after):")
    for name in ("ledger", "inspect"):
        print(f"  {name:7} wall {med(lambda g: g[name][0]):.2f} s  peak RSS {med(lambda g: g[name][1]):.0f} MiB  "
              f"CPU {med(lambda g: g[name][2]):.2f} s")
    print(f"  ratio   wall {med(lambda g: g['inspect'][0] / g['ledger'][0]):.3f} (target <= 0.2)  "
          f"peak RSS {med(lambda g: g['inspect'][1] / g['ledger'][1]):.3f} (target < 1)  "
          f"CPU {med(lambda g: g['inspect'][2] / g['ledger'][2]):.3f}")


if __name__ == "__main__":
    main()
