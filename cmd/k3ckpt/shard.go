package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/layout"
)

// layoutFlags are the flag values shared by shard and export, local to one
// command instance.
type layoutFlags struct {
	layout, partition, ranks, pack string
	textOnly, weightShard, vocabTP bool
	even, force                    bool
	jobs                           int
}

func (f *layoutFlags) register(cmd *cobra.Command, withLayout bool) {
	fl := cmd.Flags()
	if withLayout {
		fl.StringVar(&f.layout, "layout", "", "layout: "+strings.Join(layout.Names(), ", ")+", or FILE.json")
		fl.StringVar(&f.ranks, "ranks", "", "ranks to write, e.g. 0,3,8-11 (default all)")
		fl.StringVar(&f.pack, "pack-scales", "", "store block-FP8 scales packed: ue8m0 (DeepGEMM SM100 layout)")
		fl.BoolVar(&f.weightShard, "weight-shard", false, "dp16: split the weight-shard set 8 ways (default on for dp16)")
		fl.BoolVar(&f.vocabTP, "vocab-tp", false, "dp16, dp2-dcp8: split embed_tokens/lm_head rows 8 ways (default on)")
	}
	fl.StringVar(&f.partition, "pp-partition", "", "layers per pipeline stage, e.g. 7,5,7,5,…,6,3 (SGLANG_PP_LAYER_PARTITION)")
	fl.BoolVar(&f.even, "even", false, "SGLang's default split (SGLANG_PP_LAYER_PARTITION unset) instead of the layout's partition")
	fl.BoolVar(&f.textOnly, "text-only", false, "drop the vision tower and projector (default on for the decode layouts)")
	fl.BoolVar(&f.force, "force", false, "replace the content of existing output directories")
	fl.IntVar(&f.jobs, "jobs", 0, "files written at once (0: the larger of 4 and the CPU count)")
}

// resolve builds the layout: a built-in with the seed script's options,
// overridden by the flags given, or a JSON file.
func (f *layoutFlags) resolve(cmd *cobra.Command, name string, src *layout.Source) (*layout.Layout, error) {
	o, err := layout.DefaultOptions(name)
	builtin := err == nil
	fl := cmd.Flags()
	if fl.Changed("text-only") {
		o.TextOnly = f.textOnly
	}
	if fl.Changed("weight-shard") {
		o.WeightShard = f.weightShard
	}
	if fl.Changed("vocab-tp") {
		o.VocabTP = f.vocabTP
	}
	o.EvenPartition = f.even
	if f.partition != "" {
		if o.PPPartition, err = layout.ParsePartition(f.partition); err != nil {
			return nil, err
		}
	}
	if !builtin {
		for _, n := range []string{"text-only", "weight-shard", "vocab-tp", "pp-partition", "even"} {
			if fl.Changed(n) {
				return nil, fmt.Errorf("--%s applies to built-in layouts; %s defines its own rules", n, name)
			}
		}
		return layout.Resolve(name, layout.Model{}, o)
	}
	m, err := src.Model()
	if err != nil {
		return nil, err
	}
	return layout.Builtin(name, m, o)
}

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
written; files are written atomically.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExport(cmd, args[0], args[1], "pp16", &f)
		},
	}
	f.register(cmd, false)
	return cmd
}

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

func runExport(cmd *cobra.Command, srcPath, dst, name string, f *layoutFlags) error {
	pack, err := layout.ParsePackFormat(f.pack)
	if err != nil {
		return err
	}
	var ranks []int
	if f.ranks != "" {
		if ranks, err = layout.ParseRanks(f.ranks); err != nil {
			return err
		}
	}
	src, err := layout.OpenSource(srcPath)
	if err != nil {
		return err
	}
	defer src.Close()
	l, err := f.resolve(cmd, name, src)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := layout.Export(context.Background(), src, l, dst, layout.ExportOptions{Ranks: ranks, Pack: pack, Jobs: f.jobs, Force: f.force})
	if err != nil {
		return err
	}
	printExport(cmd.OutOrStdout(), res, time.Since(start))
	return nil
}

func printExport(w io.Writer, res *layout.ExportResult, took time.Duration) {
	p := res.Plan
	l := p.Layout
	fmt.Fprintf(w, "%s: %d ranks", l.Name, p.Ranks())
	if l.Stages() > 1 {
		fmt.Fprintf(w, " in %d stages %v", l.Stages(), l.Partition)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-10s %7s %9s %11s\n", "dir", "layers", "tensors", "GiB")
	for i, rr := range res.Ranks {
		fmt.Fprintf(w, "%-10s %7s %9d %11.3f\n", filepath.Base(res.Dirs[i]), fmt.Sprintf("%d-%d", rr.Layers[0], rr.Layers[1]-1),
			rr.Tensors, float64(rr.Bytes)/(1<<30))
	}
	if len(p.Dropped) > 0 {
		fmt.Fprintf(w, "dropped %d tensors (%.3f GiB)\n", len(p.Dropped), float64(p.DroppedBytes)/(1<<30))
	}
	if len(res.Unaligned) > 0 {
		fmt.Fprintf(w, "%d block-FP8 weights split across a 128 block keep their scale replicated, e.g. %s\n", len(res.Unaligned), res.Unaligned[0])
	}
	secs := took.Seconds()
	fmt.Fprintf(w, "wrote %d files, %.3f GiB in %.2fs (%.0f MiB/s)\n", res.Files, float64(res.Bytes)/(1<<30), secs, float64(res.Bytes)/(1<<20)/max(secs, 1e-9))
}

func newReassembleCmd() *cobra.Command {
	var check string
	var force bool
	var jobs int
	cmd := &cobra.Command{
		Use:   "reassemble DST OUT",
		Short: "Rebuild the source checkpoint from shard/export output and prove it lossless",
		Long: `reassemble reads the rank-NN or stage-NN directories of a shard or export
(their layout.json manifests) and writes the source checkpoint to OUT: every
source shard with its tensors rebuilt (slices gathered, dropped padding zero-
filled, packed scales unpacked), its metadata and canonical layout, the index
and config.json. For a lossless export the files are byte-identical to the
source; tensors the layout dropped (vision for text-only serving) are listed.
--check SRC compares every rebuilt tensor with SRC byte for byte.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			start := time.Now()
			res, err := layout.Reassemble(context.Background(), args[0], args[1], layout.ReassembleOptions{Jobs: jobs, Force: force})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "rebuilt %d files, %.3f GiB in %.2fs\n", res.Files, float64(res.Bytes)/(1<<30), time.Since(start).Seconds())
			if len(res.Missing) > 0 {
				fmt.Fprintf(w, "%d source tensors were dropped by the layout (e.g. %s); their files lack them\n", len(res.Missing), res.Missing[0])
			}
			if check == "" {
				return nil
			}
			a, err := layout.OpenSource(check)
			if err != nil {
				return err
			}
			defer a.Close()
			b, err := layout.OpenSource(args[1])
			if err != nil {
				return err
			}
			defer b.Close()
			n, err := layout.Compare(context.Background(), a, b)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "check: %d tensors, %.3f GiB byte-identical to %s\n", len(b.Specs), float64(n)/(1<<30), check)
			return nil
		},
	}
	cmd.Flags().StringVar(&check, "check", "", "compare every rebuilt tensor with this source checkpoint")
	cmd.Flags().BoolVar(&force, "force", false, "replace the content of an existing OUT")
	cmd.Flags().IntVar(&jobs, "jobs", 0, "files written at once (0: the larger of 4 and the CPU count)")
	return cmd
}

func init() {
	rootCmd.AddCommand(newShardCmd(), newExportCmd(), newReassembleCmd())
}
