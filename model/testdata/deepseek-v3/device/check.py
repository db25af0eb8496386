# Compares k3ckpt's FP8 -> BF16 conversion of a DeepSeek-format replica with
# DeepSeek's inference/fp8_cast_bf16.py (weight_dequant, Triton) run on the
# same files: every tensor of the reference must equal k3ckpt's bit for bit.
import json, os, sys, glob, torch
from safetensors.torch import load_file
ref, ours, out = sys.argv[1], sys.argv[2], sys.argv[3]
r, o = {}, {}
for f in glob.glob(os.path.join(ref, "*.safetensors")):
    r.update(load_file(f))
for f in glob.glob(os.path.join(ours, "*.safetensors")):
    o.update(load_file(f))
res = {"reference_tensors": len(r), "k3ckpt_tensors": len(o), "missing": [], "differ": [], "equal": 0, "bf16_equal": 0}
for k, v in sorted(r.items()):
    if k not in o:
        res["missing"].append(k)
        continue
    w = o[k]
    if v.dtype != w.dtype or v.shape != w.shape or not torch.equal(v.view(torch.uint8) if v.dtype != torch.bool else v, w.view(torch.uint8) if w.dtype != torch.bool else w):
        res["differ"].append([k, str(v.dtype), str(w.dtype), list(v.shape)])
    else:
        res["equal"] += 1
        if v.dtype == torch.bfloat16:
            res["bf16_equal"] += 1
res["extra"] = sorted(set(o) - set(r))
res["torch"] = torch.__version__
import triton; res["triton"] = triton.__version__
res["gpu"] = torch.cuda.get_device_name(0)
json.dump(res, open(out, "w"), indent=1)
print(json.dumps({k: (v if not isinstance(v, list) else len(v)) for k, v in res.items()}))
