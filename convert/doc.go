// Package convert turns a BF16/MXFP4 Kimi-K3-class checkpoint into one with
// block-FP8 weights and, on request, NVFP4 routed experts (the built-in
// recipes attn-moe-dense-fp8 and modelopt-k3), in one of three engine
// conventions, and checks the result. It also goes back: --recipe bf16 /
// --experts bf16 decode block FP8, MXFP4 and NVFP4 to BF16 as torch computes
// them, --experts mxfp4 packs BF16 experts into the release's
// compressed-tensors MXFP4 bit for bit (StepDecode, StepPack), and --experts
// fp8 casts MXFP4 (or BF16) experts to block FP8 through their exact BF16
// decode (fp8experts.go).
//
// Every decision is made before any byte is written:
//
//   - PlanTensors (pure, headers only; inspect calls it too) decides for
//     every source tensor whether it is copied, quantized to block FP8 with
//     its scale tensor (DeepGEMM's or ModelOpt's numerics), cast from MXFP4
//     to NVFP4 (four tensors per projection, as NVIDIA's converter writes
//     them), or dropped.
//   - NewPlan adds, per output shard (one per source shard, same name), its
//     complete layout and the steps that fill it, plus the output config,
//     the side files, what every source file looked like, and a fingerprint
//     of all of it.
//   - Execute carries a plan out without deciding anything: it checks that
//     each source file is still the one planned, writes the planned header,
//     copies kept tensors by byte range (for a remote source, one coalesced
//     fetch per shard), streams quantized tensors and casts in bands through
//     bounded, pooled buffers and one in-order, hashing writer per file,
//     counts what a format cannot hold exactly, and measures the error of
//     every lossy step in the same pass (quantization_report.json). Files
//     appear under their final names only when complete and synced; a
//     record of each lets a rerun skip work that verifies, and lets several
//     workers share one conversion that Finalize (k3ckpt merge) completes. A
//     run holds DST locked; a worker of a split holds its slice's lock.
//   - Verify re-reads an output against its source: DST holds exactly the
//     manifest's files, copied tensors are the source's bytes, FP8 and NVFP4
//     tensors bit for bit a fresh quantization or cast.
package convert
