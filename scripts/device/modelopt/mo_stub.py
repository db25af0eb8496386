"""Build an importable copy of NVIDIA Model-Optimizer's Kimi-K3 converter from its own files.

NVIDIA's `examples/kimi/kimi_k3/quantize_to_nvfp4.py` needs only torch and safetensors at run
time, but importing it through the `modelopt` package pulls in the whole library. This module
lays out, in a scratch directory, exactly the files the converter's numeric and config code runs
(copied unchanged from a Model-Optimizer checkout) plus stubs for what it imports but never
calls on the paths we run:

  unchanged: examples/_shard_cast_utils.py, examples/kimi/kimi_k3/quantize_to_nvfp4.py,
             modelopt/torch/export/convert_hf_config.py,
             modelopt/torch/quantization/qtensor/{base_qtensor,fp8,mxfp4,mxfp8,nvfp4}_tensor.py,
             modelopt/torch/quantization/utils/numeric_utils.py
  extracted: from modelopt/torch/quantization/utils/core_utils.py, the source text of
             reduce_amax, reduce_block_amax, reduce_block_padding,
             convert_quantization_axis_to_reduce_axis and _FP8_DTYPES (the rest of that file
             imports FSDP/accelerate machinery the converter never uses)
  stubbed:   modelopt.__version__ (MODELOPT_VERSION, default 0.47.0dev: the tag below the
             pinned commit), modelopt.recipe.load_recipe (raises: --recipe is not used),
             qtensor's FSDP helpers (fsdp2_aware_weight_update, patch_fsdp_mp_dtypes: only
             used by pack_real_quantize_weight), backends.utils.fp4_compatible (False: the
             TensorRT-LLM kernel path is off, try_tensorrt=False in the converter anyway)

Usage: root = build(src_dir, dst_dir); sys.path.insert(0, root); then import
`examples._shard_cast_utils`, `modelopt.torch.quantization.qtensor`, ... or run
`python3 <root>/examples/kimi/kimi_k3/quantize_to_nvfp4.py` with PYTHONPATH=<root>.
"""

import ast
import os
import shutil

UNCHANGED = [
    "examples/_shard_cast_utils.py",
    "examples/kimi/kimi_k3/quantize_to_nvfp4.py",
    "modelopt/torch/export/convert_hf_config.py",
    "modelopt/torch/quantization/qtensor/base_qtensor.py",
    "modelopt/torch/quantization/qtensor/fp8_tensor.py",
    "modelopt/torch/quantization/qtensor/mxfp4_tensor.py",
    "modelopt/torch/quantization/qtensor/mxfp8_tensor.py",
    "modelopt/torch/quantization/qtensor/nvfp4_tensor.py",
    "modelopt/torch/quantization/utils/numeric_utils.py",
]
CORE_UTILS = "modelopt/torch/quantization/utils/core_utils.py"
CORE_NAMES = [
    "_FP8_DTYPES",
    "reduce_amax",
    "reduce_block_amax",
    "reduce_block_padding",
    "convert_quantization_axis_to_reduce_axis",
]

STUBS = {
    # a regular package, so that no other top-level "examples" on sys.path shadows it
    "examples/__init__.py": "",
    "modelopt/__init__.py": 'import os\n__version__ = os.environ.get("MODELOPT_VERSION", "0.47.0dev")\n',
    "modelopt/recipe/__init__.py": (
        "def load_recipe(path):\n"
        '    raise NotImplementedError("stub: recipes are not part of this run; use the flags")\n'
    ),
    "modelopt/torch/__init__.py": "",
    "modelopt/torch/export/__init__.py": "",
    "modelopt/torch/quantization/__init__.py": "",
    "modelopt/torch/quantization/backends/__init__.py": "",
    "modelopt/torch/quantization/backends/utils.py": "def fp4_compatible():\n    return False\n",
    "modelopt/torch/quantization/qtensor/__init__.py": (
        "from .base_qtensor import *\nfrom .fp8_tensor import *\nfrom .mxfp4_tensor import *\n"
        "from .mxfp8_tensor import *\nfrom .nvfp4_tensor import *\n"
    ),
    "modelopt/torch/quantization/utils/__init__.py": (
        "import contextlib\n"
        "from .core_utils import *  # noqa: F403\n"
        "from .core_utils import _FP8_DTYPES  # noqa: F401\n\n"
        "def fsdp2_aware_weight_update(*args, **kwargs):\n"
        '    raise NotImplementedError("stub: FSDP is not part of this run")\n\n'
        "def patch_fsdp_mp_dtypes():\n"
        "    return contextlib.nullcontext()\n"
    ),
}


def _extract_core_utils(text):
    tree = ast.parse(text)
    parts = ["import torch\nimport torch.nn.functional as F\n"]
    found = set()
    for node in tree.body:
        name = None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = node.name
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        if name in CORE_NAMES:
            seg = ast.get_source_segment(text, node)
            decos = "".join("@" + ast.get_source_segment(text, d) + "\n" for d in getattr(node, "decorator_list", []))
            parts.append(decos + seg + "\n")
            found.add(name)
    missing = set(CORE_NAMES) - found
    if missing:
        raise SystemExit(f"core_utils.py lacks {sorted(missing)}")
    parts.append("__all__ = %r\n" % [n for n in CORE_NAMES if not n.startswith("_")])
    return "\n\n".join(parts)


def build(src, dst):
    """Lay out the importable tree under dst from a Model-Optimizer checkout (or copy) at src."""
    if os.path.exists(dst):
        shutil.rmtree(dst)
    for rel in UNCHANGED:
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copyfile(os.path.join(src, rel), os.path.join(dst, rel))
    for rel, body in STUBS.items():
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        with open(os.path.join(dst, rel), "w") as f:
            f.write(body)
    with open(os.path.join(src, CORE_UTILS)) as f:
        core = _extract_core_utils(f.read())
    with open(os.path.join(dst, CORE_UTILS), "w") as f:
        f.write(core)
    return dst


if __name__ == "__main__":
    import sys

    print(build(sys.argv[1], sys.argv[2]))
