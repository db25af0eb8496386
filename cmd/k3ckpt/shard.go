package main

import (
	"github.com/spf13/cobra"
)

func newShardCmd() *cobra.Command {
	var f layoutFlags
	cmd := &cobra.Command{
		Use:   "shard SRC DST",
		Short: "Write one complete checkpoint per PP16 prefill stage (DST/stage-NN)",
		Long: `shard splits a checkpoint into pipeline stages (layout pp16): DST/stage-00 …
stage-15, each a complete checkpoint (shards, index with total_size, config.json
recording the stage's layer range under "k3ckpt_stage", layout.json) holding
exactly that stage's tensors, byte-identical to the source. Stage s owns layers
[sum(p[:s]), sum(p[:s+1])) of the partition p (default 7,5,7,5,…,7,5,6,3 for 93
layers; --even for SGLang's split without SGLANG_PP_LAYER_PARTITION); stage 0
also holds embed_tokens and vision (unless --text-only), the last stage the final
norms, output_attn_res_* and lm_head. Everything is checked before anything is
written (--dry-run prints the plan); files are written atomically, and a rerun
after an interruption resumes (--restart starts over).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExport(cmd, args[0], args[1], "pp16", &f)
		},
	}
	f.register(cmd, false)
	return cmd
}
