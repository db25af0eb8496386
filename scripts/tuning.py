#!/usr/bin/env python3
"""Side by side: what each runtime/I-O tuning of `k3ckpt convert` buys.

    scripts/tuning.py build BINDIR          # from this checkout's working tree
    k3ckpt synth SRC --scale small
    scripts/tuning.py run BINDIR SRC ROUNDS [CONVERT-FLAGS...]

`build` compiles static binaries: `k3ckpt` as the tree is, and one per
tuning with that tuning alone taken out of the source (the patch fails
loudly when the code it removes is no longer there):

    no-gc      no collector/memory-limit setting (cmd/k3ckpt/memory.go)

(The results in scripts/tuning.txt and scripts/device/results/tuning-16core
also took out O_DIRECT writes and huge-page staging buffers: binaries built
at dbfcf81, whose internal/filewrite still had them.)

`run` converts SRC (with CONVERT-FLAGS, e.g. --jobs 2 or --dry-run) into a
fresh DST beside it with every binary in BINDIR, ROUNDS times, the binaries
in a new random order each round, DST removed and synced away (untimed)
between runs. It prints, per binary, the median over
the rounds of its time divided by the same round's time of `k3ckpt` (the
paired ratio: a ratio above 1.10 means the tuning it lacks saves more than
10% end to end), the median seconds, and the peak RSS.
"""
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# variant -> [(file, old, new)]; each old must occur exactly once.
PATCHES = {
    "no-gc": [
        ("cmd/k3ckpt/memory.go", "func planMemory(src string) {", "func planMemory(src string) { return;"),
        ("cmd/k3ckpt/memory.go", "func gcPace(percent int) {", "func gcPace(percent int) { return;"),
        ("cmd/k3ckpt/memory.go", "func setMemoryLimit(jobs, tensors int) {", "func setMemoryLimit(jobs, tensors int) { return;"),
    ],
}


def build(bindir):
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True).stdout.strip()
    files = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split()
    os.makedirs(bindir, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0")
    for name, patches in [("k3ckpt", [])] + [("k3ckpt-" + v, p) for v, p in PATCHES.items()]:
        with tempfile.TemporaryDirectory() as tree:
            for f in files:
                if os.path.exists(os.path.join(root, f)):
                    os.makedirs(os.path.dirname(os.path.join(tree, f)), exist_ok=True)
                    shutil.copy(os.path.join(root, f), os.path.join(tree, f))
            for f, old, new in patches:
                path = os.path.join(tree, f)
                text = open(path).read()
                if text.count(old) != 1:
                    sys.exit(f"{name}: {f} holds {old!r} {text.count(old)} times, want once: update PATCHES")
                open(path, "w").write(text.replace(old, new))
            subprocess.run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", os.path.abspath(os.path.join(bindir, name)), "./cmd/k3ckpt"],
                           cwd=tree, env=env, check=True)
        print("built", os.path.join(bindir, name))


def run(bindir, src, rounds, flags):
    src = os.path.abspath(src)
    bins = sorted(b for b in os.listdir(bindir) if b == "k3ckpt" or b.startswith("k3ckpt-"))
    if "k3ckpt" not in bins:
        sys.exit(f"{bindir}: no k3ckpt binary (run build first)")
    dst = os.path.join(os.path.dirname(src), ".k3ckpt-tuning-out")
    subprocess.run(f"cat '{src}'/* > /dev/null", shell=True, check=True)
    secs = {b: [] for b in bins}
    rss = {b: 0 for b in bins}
    for _ in range(rounds):
        order = bins[:]
        random.shuffle(order)
        for b in order:
            shutil.rmtree(dst, ignore_errors=True)
            subprocess.run(["sync"], check=True)
            argv = [os.path.join(bindir, b), "convert", src, dst, "--quiet"] + flags
            t0 = time.monotonic()
            p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            err = p.stderr.read()
            _, status, ru = os.wait4(p.pid, 0)
            t1 = time.monotonic()
            if status:
                sys.exit(f"{b}: exit status {status}: {err.decode()}")
            secs[b].append(t1 - t0)
            rss[b] = max(rss[b], ru.ru_maxrss)
        print(f"round {len(secs['k3ckpt'])}: " + " ".join(f"{b} {secs[b][-1]:.3f}" for b in bins), flush=True)
    shutil.rmtree(dst, ignore_errors=True)
    print(f"{src}: {rounds} rounds, flags {' '.join(flags) or 'none'}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"  {'binary':18s} {'time/k3ckpt':>11s} {'median s':>9s} {'peak RSS':>9s}  rounds (s)")
    for b in bins:
        ratio = statistics.median(x / y for x, y in zip(secs[b], secs["k3ckpt"]))
        print(f"  {b:18s} {ratio:10.3f}x {statistics.median(secs[b]):9.3f} {rss[b] / 1024:6.0f} MiB  "
              + " ".join(f"{x:.2f}" for x in secs[b]))


def main():
    a = sys.argv[1:]
    if len(a) == 2 and a[0] == "build":
        build(a[1])
    elif len(a) >= 4 and a[0] == "run":
        run(a[1], a[2], int(a[3]), a[4:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
