// Package quant holds the number formats k3ckpt converts between, bit-exact with
// the references that serving engines are tested against: PyTorch's casts
// (c10/util/Float8_e4m3fn.h, BFloat16.h), DeepGEMM's block quantizer
// (per_block_cast_to_fp8, ceil_to_ue8m0) and its SM100 packed UE8M0 scale
// layout, the MXFP4 (E2M1 + E8M0) experts of compressed-tensors checkpoints,
// and NVIDIA Model-Optimizer's numerics as its Kimi-K3 converter runs them:
// the FP8_PB_WO block cast (Numerics ModelOpt, BF16 scales) and the
// closed-form MXFP4 → NVFP4 expert cast (KMax, NewNVFP4Cast), which
// counts every block that is not lossless instead of hiding it.
//
// Every lossy kernel can also measure what it loses (ErrStats: Σx², Σ(x−x̂)²,
// the largest error and the blocks that changed), in the same pass and in a
// fixed summation order, for convert's quantization_report.json.
//
// It is a leaf package without I/O. The block quantizer works on one band of
// at most BlockSize rows at a time, so a converter streaming a matrix needs no
// more than one band of input and output per worker, and the hot loop
// allocates nothing. On amd64 with AVX2 the per-element work runs in vector
// kernels (kernels_amd64.s; the measured BF16 → FP8 encode sixteen elements a
// step where the CPU has AVX-512); the portable Go kernels give the same
// bytes and the same error sums.
//
// A bit pattern that differs from what PyTorch/DeepGEMM writes is a silent
// accuracy bug in production, so the tests compare every byte against goldens
// made by quant/testdata/torch/gen_goldens.py with PyTorch 2.11 on CPU and CUDA
// (K3CKPT_EXHAUSTIVE=1 extends the float32 cast checks to all 2^32 inputs),
// and the ModelOpt numerics against goldens made by NVIDIA's own functions
// (testdata/modelopt_goldens.json.gz, from scripts/device/modelopt). The
// way back, to BF16 (MXFP4ToBF16, NVFP4ToBF16, DequantizeBandBF16), and the
// release's own MXFP4 packing (PackMXFP4Measured, compressed-tensors' rule) are
// checked against goldens from torch and compressed-tensors' functions
// (testdata/bidir_goldens.*, from testdata/gen_bidir.py).
package quant
