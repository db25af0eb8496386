// Package convert turns a BF16/MXFP4 Kimi-K3-class checkpoint into one with
// block-FP8 weights and, on request, NVFP4 routed experts (the built-in
// recipes attn-moe-dense-fp8 and modelopt-k3, or any recipe written as data),
// in one of three engine conventions, and checks the result. It also goes
// back: --recipe bf16 / --experts bf16 decode block FP8, MXFP4 and NVFP4 to
// BF16 as torch computes them, and --experts mxfp4 packs BF16 experts into
// the release's compressed-tensors MXFP4, bit for bit as compressed-tensors
// does (StepDecode, StepPack); --experts fp8 casts MXFP4 (or BF16) experts to
// block FP8 through the BF16 path's quantizer, reading MXFP4 through its
// exact BF16 decode (fp8experts.go).
//
// The work is split so that every decision is made before any byte is written:
//
//   - PlanTensors (pure, headers only) decides for every source tensor whether
//     it is copied, quantized to block-FP8 with its scale tensor (DeepGEMM's
//     or ModelOpt's numerics), cast from MXFP4 to NVFP4 (four tensors per
//     expert projection, as NVIDIA's converter writes them), or dropped;
//     inspect's what-if accounting calls it too.
//   - NewPlan adds, per output shard (one per source shard, same name), its
//     complete layout and the steps that fill it, plus the output config (in
//     the chosen engine convention), the side files to copy, what every
//     source file looked like when planned, and a fingerprint of all of it.
//   - Execute carries a plan out without deciding anything: it checks that
//     each source file is still the one planned (size, times and header; a
//     remote one's size and ETag), writes the planned header, copies kept
//     tensors by byte range (from a local file, or from one coalesced fetch
//     per shard of a remote source), streams quantized tensors in 128-row
//     bands and NVFP4 casts in bands of rows, all through bounded, pooled
//     buffers and one in-order, hashing writer per file (internal/filewrite),
//     and counts what a format cannot hold exactly (zero-scale FP8 tiles,
//     NVFP4 blocks outside E4M3's exponent window or whose values changed)
//     for the caller to report, and measures the error of every lossy step
//     in the same pass (quantization_report.json, one share per file kept
//     with its done record). Files appear under their final names only
//     when complete and synced; a record of each finished file lets a rerun skip
//     work that verifies, and lets several workers (processes or machines)
//     share one conversion that Finalize (k3ckpt merge) completes. A single
//     run holds DST locked throughout; a worker of a split holds its slice's
//     lock, so workers of one split run side by side.
//   - Verify re-reads an output against its source: DST holds exactly the
//     manifest's files, copied tensors are the source's bytes, FP8 tensors
//     and scales are bit for bit a fresh quantization, NVFP4 tensors bit for
//     bit a fresh cast, whose block counts it reports.
package convert
