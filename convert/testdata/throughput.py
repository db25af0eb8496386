#!/usr/bin/env python3
"""Side-by-side throughput of k3ckpt commands and cp -r on the same disk.

Each round copies SRC with `cp -r` (timed, then `sync` timed on top), then
runs every command given, each into an empty DST on the same filesystem.
Everything runs warm: SRC is read once before the first round, and every
output is removed and synced away (untimed) before the next command. The
medians over the rounds are printed, with each command's ratio to cp -r and
to cp -r + sync and its peak RSS (GNU time's %M), and the median over the
rounds of its time divided by the time of that round's cp -r + sync (the
paired ratio, which machine load moves least).

Commands named convert* are rated by SRC's bytes per second (the checkpoint
converted); the others (shard, export) by the bytes they write.

    k3ckpt synth /data/small --scale small
    convert/testdata/throughput.py /data/small 5 \\
        "convert=k3ckpt convert SRC DST --jobs 2" \\
        "pp16=k3ckpt shard SRC DST" \\
        "dp16=k3ckpt export --layout dp16 SRC DST" \\
        "dcp8=k3ckpt export --layout dp2-dcp8 SRC DST"

DST is made next to SRC, so both are on the disk measured. Check `uptime`
first: other work on the machine moves these figures by tens of percent.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    src, rounds = os.path.abspath(sys.argv[1]), int(sys.argv[2])
    cmds = [a.split("=", 1) for a in sys.argv[3:]]
    size = tree_bytes(src)
    out = os.path.join(os.path.dirname(src), ".k3ckpt-throughput-out")
    rss_file = tempfile.NamedTemporaryFile(delete=False).name

    def clean():
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run(["sync"], check=True)

    subprocess.run(f"cat '{src}'/* > /dev/null", shell=True, check=True)
    rates = {k: [] for k in ["cp -r", "cp -r + sync"] + [n for n, _ in cmds]}
    rss, wrote = {n: 0 for n, _ in cmds}, {}
    paired = {n: [] for n, _ in cmds}
    for _ in range(rounds):
        clean()
        t0 = time.monotonic()
        subprocess.run(["cp", "-r", src, out], check=True)
        t1 = time.monotonic()
        subprocess.run(["sync"], check=True)
        t2 = time.monotonic()
        rates["cp -r"].append(size / (t1 - t0))
        rates["cp -r + sync"].append(size / (t2 - t0))
        cp_sync = t2 - t0
        for name, cmd in cmds:
            clean()
            argv = [a.replace("SRC", src).replace("DST", out) for a in cmd.split()]
            t0 = time.monotonic()
            p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + argv,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            t1 = time.monotonic()
            if p.returncode:
                sys.exit(f"{name}: exit {p.returncode}: {p.stderr.decode()}")
            wrote[name] = tree_bytes(out)
            paired[name].append((t1 - t0) / cp_sync)
            rates[name].append((size if name.startswith("convert") else wrote[name]) / (t1 - t0))
            with open(rss_file) as f:
                rss[name] = max(rss[name], int(f.read().split()[-1]))
    clean()
    os.unlink(rss_file)
    med = {k: statistics.median(v) for k, v in rates.items()}
    cp, cps = med["cp -r"], med["cp -r + sync"]
    print(f"{src}: {size / 1e9:.2f} GB, {rounds} rounds, load {os.getloadavg()[0]:.2f}")
    for k in ["cp -r", "cp -r + sync"]:
        print(f"  {k:14s} {med[k] / 1e6:6.0f} MB/s")
    for name, _ in cmds:
        m = med[name]
        print(f"  {name:14s} {m / 1e6:6.0f} MB/s  {m / cp:.2f}x cp -r  {m / cps:.2f}x cp -r + sync  "
              f"time {statistics.median(paired[name]):.2f}x cp -r + sync (paired)  "
              f"wrote {wrote[name] / 1e9:.2f} GB  peak RSS {rss[name] / 1024:.0f} MiB  "
              f"(rounds: {' '.join(f'{x / 1e6:.0f}' for x in rates[name])})")


if __name__ == "__main__":
    main()
