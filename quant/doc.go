// Package quant holds the number formats k3ckpt converts between, bit-exact with
// the references serving engines are tested against: PyTorch's casts
// (c10/util/Float8_e4m3fn.h, BFloat16.h), DeepGEMM's block quantizer
// (per_block_cast_to_fp8, ceil_to_ue8m0) and SM100 packed UE8M0 scale layout,
// the MXFP4 (E2M1 + E8M0) experts of compressed-tensors checkpoints, and
// NVIDIA Model-Optimizer's FP8_PB_WO block cast and closed-form MXFP4 → NVFP4
// expert cast as its Kimi-K3 converter runs them.
//
// Every lossy kernel can measure what it loses (ErrStats) in the same pass, in
// a fixed summation order, for convert's quantization_report.json.
//
// It is a leaf package without I/O; the block quantizer's hot loop allocates
// nothing. On amd64 with AVX2 the per-element work runs in vector kernels
// (kernels_amd64.s) that give the same bytes and sums as the Go ones.
//
// A bit pattern that differs from PyTorch/DeepGEMM's is a silent accuracy bug,
// so the tests compare every byte against goldens from
// testdata/torch/gen_goldens.py (PyTorch 2.11, CPU and CUDA;
// K3CKPT_EXHAUSTIVE=1 checks all 2^32 float32 casts), from NVIDIA's own
// functions (testdata/modelopt_goldens.json.gz, scripts/device/modelopt), and
// from torch and compressed-tensors for BF16 restores and MXFP4 packing
// (testdata/bidir_goldens.*, testdata/gen_bidir.py).
package quant
