#!/usr/bin/env python3
"""Checks every file a k3ckpt manifest lists against hashlib's sha256 and its size.

    check_manifests.py DIR [DIR ...]

Each DIR is a finished conversion (it holds k3ckpt-manifest.json). The
manifest's digests are taken while the files are written (two files at once
on CPUs with SHA instructions); this recomputes them independently, from the
bytes on disk. Exit 1 on any mismatch.
"""
import hashlib
import json
import os
import sys


def main():
    bad = 0
    for d in sys.argv[1:]:
        with open(os.path.join(d, "k3ckpt-manifest.json")) as f:
            files = json.load(f)["files"]
        before = bad
        for rec in files:
            p = os.path.join(d, rec["name"])
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for b in iter(lambda: f.read(1 << 20), b""):
                    h.update(b)
            if h.hexdigest() != rec["sha256"] or os.path.getsize(p) != rec["size"]:
                print("MISMATCH", p)
                bad += 1
        n = bad - before
        print(f"{d}: {len(files)} files, sha256 and size as the manifest says" if not n else f"{d}: {n} mismatches")
    sys.exit(1 if bad else 0)


main()
