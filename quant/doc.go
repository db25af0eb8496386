// Package quant holds the number formats k3ckpt converts between, bit-exact with
// the references that serving engines are tested against: PyTorch's casts
// (c10/util/Float8_e4m3fn.h, BFloat16.h), DeepGEMM's block quantizer
// (per_block_cast_to_fp8, ceil_to_ue8m0) and its SM100 packed UE8M0 scale
// layout, and the MXFP4 (E2M1 + E8M0) experts of compressed-tensors checkpoints.
//
// It is a leaf package without I/O. The block quantizer works on one band of
// at most BlockSize rows at a time, so a converter streaming a matrix needs no
// more than one band of input and output per worker; a Quantizer keeps its own
// scratch space, so the hot loop allocates nothing.
//
// A bit pattern that differs from what PyTorch/DeepGEMM writes is a silent
// accuracy bug in production, so the tests compare every byte against goldens
// made by testdata/quant/gen_goldens.py with PyTorch.
package quant
