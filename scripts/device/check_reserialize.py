"""Proves k3ckpt writes safetensors files exactly as the reference serializer does.

    python3 check_reserialize.py DIR [DIR ...]

For every *.safetensors under each DIR (recursively) it loads the tensors with
safetensors.torch.load_file, writes them again with safetensors.torch.save_file
(same metadata) and compares the two files byte for byte. Exit 1 on any
difference. Used on the device with a tiny replica, its conversion and its
exports (see scripts/device/README.md); its output is committed next to it.
"""
import glob
import os
import sys
import tempfile

from safetensors import safe_open
from safetensors.torch import load_file, save_file

files = bad = 0
with tempfile.TemporaryDirectory() as tmp:
    for d in sys.argv[1:]:
        for path in sorted(glob.glob(os.path.join(d, "**", "*.safetensors"), recursive=True)):
            with safe_open(path, "pt") as f:
                meta = f.metadata()
            tensors = load_file(path)
            out = os.path.join(tmp, "x.safetensors")
            save_file(tensors, out, metadata=meta)
            with open(path, "rb") as a, open(out, "rb") as b:
                same = a.read() == b.read()
            files += 1
            if not same:
                bad += 1
                print("DIFFERS:", path)
print(f"reserialize: {files} files checked, {bad} differ")
sys.exit(1 if bad or not files else 0)
