// Package convert turns a BF16/MXFP4 Kimi-K3-class checkpoint into a
// block-FP8 one (the ATTN-MOE-DENSE-FP8 recipe and any other recipe written as
// data), and checks the result.
//
// The work is split so that every decision is made before any byte is written:
//
//   - PlanTensors (pure, headers only) decides for every source tensor whether
//     it is copied, quantized to block-FP8 with its scale tensor, or dropped;
//     inspect's what-if accounting calls it too.
//   - NewPlan adds files and offsets (one output shard per source shard, same
//     names), the output config (in the chosen engine convention), the index,
//     the auxiliary files to copy and a fingerprint of all of it.
//   - Execute carries a plan out without deciding anything: per output shard a
//     canonical safetensors writer, copied tensors moved by byte range
//     (copy_file_range), quantized tensors streamed in 128-row bands through
//     bounded, pooled buffers. Files appear under their final names only when
//     complete and synced; a record per finished file lets Resume skip work
//     that verifies, and lets several workers (processes or machines) share
//     one conversion that Finalize (k3ckpt merge) completes.
//   - Verify re-reads an output against its source.
package convert
