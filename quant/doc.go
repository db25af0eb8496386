// Package quant holds the number formats k3ckpt converts between, bit-exact with
// the references that serving engines are tested against: PyTorch's casts
// (c10/util/Float8_e4m3fn.h, BFloat16.h), DeepGEMM's block quantizer
// (per_block_cast_to_fp8, ceil_to_ue8m0) and its SM100 packed UE8M0 scale
// layout, the MXFP4 (E2M1 + E8M0) experts of compressed-tensors checkpoints,
// and NVIDIA Model-Optimizer's numerics as its Kimi-K3 converter runs them
// (the FP8_PB_WO block cast, and the closed-form MXFP4 → NVFP4 expert cast,
// which counts every block that is not lossless).
//
// Every lossy kernel can also measure what it loses (ErrStats), in the same
// pass and in a fixed summation order, for convert's quantization_report.json.
//
// It is a leaf package without I/O. The block quantizer works on one band of
// at most BlockSize rows at a time and its hot loop allocates nothing. On
// amd64 with AVX2 the per-element work runs in vector kernels
// (kernels_amd64.s); the portable Go kernels give the same bytes and sums.
//
// A bit pattern that differs from what PyTorch/DeepGEMM writes is a silent
// accuracy bug in production, so the tests compare every byte against goldens
// made by testdata/torch/gen_goldens.py (PyTorch 2.11, CPU and CUDA;
// K3CKPT_EXHAUSTIVE=1 checks all 2^32 float32 casts), by NVIDIA's own
// functions (testdata/modelopt_goldens.json.gz, from scripts/device/modelopt),
// and by torch and compressed-tensors for the way back to BF16 and the MXFP4
// packing (testdata/bidir_goldens.*, from testdata/gen_bidir.py).
package quant
