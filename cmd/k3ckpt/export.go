package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/layout"
)

func newExportCmd() *cobra.Command {
	var f layoutFlags
	cmd := &cobra.Command{
		Use:   "export SRC DST --layout NAME|FILE",
		Short: "Write each rank's slice of a checkpoint under a decode layout (DST/rank-NN)",
		Long: `export writes DST/rank-NN for every rank of a layout (or --ranks): safetensors
files with the rank's tensors under their source names (a split tensor holds the
rank's slice), an index, config.json and layout.json, the manifest recording for
each tensor its source shape and the axis and [start, stop) it holds, or that it
is replicated or an expert's. Built-in layouts: dp16 (EP16 experts, weight shard
1/8 rows, vocab TP8), dp2-dcp8 (KDA head TP8, replicated Q, dense TP8, vocab TP8),
pp8-tp8 and pp16; or a JSON layout file. Block-FP8 scales follow their weight
where the split keeps 128 blocks whole, else stay replicated (listed).
--pack-scales ue8m0 stores them in DeepGEMM's SM100 packed int32 layout. SRC may
itself be an export (its tensors are rebuilt on the fly: slices gathered, packed
scales unpacked, gathered by head and repacked).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.layout == "" {
				return fmt.Errorf("--layout is required (%s, or FILE.json)", strings.Join(layout.Names(), ", "))
			}
			return runExport(cmd, args[0], args[1], f.layout, &f)
		},
	}
	f.register(cmd, true)
	return cmd
}
