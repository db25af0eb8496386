package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/inspect"
	"github.com/k3ckpt/k3ckpt/layout"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// inspectFlags are the inspect command's flag values, local to one command
// instance (no package-level flag globals).
type inspectFlags struct {
	by, recipe, format, layout, partition, chart string
	experts                                      string
	asJSON, tensors, strict                      bool
}

func newInspectCmd() *cobra.Command {
	var f inspectFlags
	cmd := &cobra.Command{
		Use:   "inspect PATH|URL",
		Short: "Audit a checkpoint from its headers: GiB per component, dtype, layer, file, stage and rank",
		Long: `inspect reads only the safetensors headers, config.json and the index (never
tensor data) of a checkpoint directory, index file, single file or http(s) URL,
and accounts its tensors and bytes (1 GiB = 2^30 bytes).

  --by component|dtype|layer|stage|rank|file   main table (default component)
  --recipe NAME     also account the checkpoint the recipe would produce
  --experts nvfp4   ... with the routed experts cast to NVFP4 (alone or with --recipe)
  --layout NAME     per-rank (and per-stage) resident bytes: ` + fmt.Sprint(layout.Names()) + ` or FILE.json
  --chart FILE.svg  per-rank memory step by step (BF16 → text only → FP8 → weight shard → vocab TP8)
  --tensors         list every tensor (name, dtype, shape, file, data_offsets)`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInspect(cmd, args[0], &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.by, "by", inspect.ByComponent.String(), "group by component|dtype|layer|stage|rank|file")
	fl.StringVar(&f.recipe, "recipe", "", "what-if: account the output of this convert recipe ("+fmt.Sprint(convert.RecipeNames())+")")
	fl.StringVar(&f.format, "format", convert.ModelOpt.String(), "scale convention of the --recipe output (modelopt|deepseek|compressed-tensors)")
	fl.StringVar(&f.experts, "experts", convert.ExpertsKeep.String(), "what-if for the routed experts: keep, or nvfp4 (MXFP4 cast to NVFP4; alone or with --recipe)")
	fl.StringVar(&f.layout, "layout", "", "per-rank/per-stage bytes under a layout: built-in name or FILE.json")
	fl.StringVar(&f.partition, "pp-partition", "", "layers per pipeline stage, e.g. 7,5,7,5,…,6,3 (SGLANG_PP_LAYER_PARTITION)")
	fl.StringVar(&f.chart, "chart", "", "write the per-rank memory steps of --layout (default dp16) as an SVG chart")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object instead of tables")
	fl.BoolVar(&f.tensors, "tensors", false, "list every tensor instead of the accounting")
	fl.BoolVar(&f.strict, "strict", false, "fail when a tensor's shape disagrees with config.json")
	return cmd
}

func init() { rootCmd.AddCommand(newInspectCmd()) }

func runInspect(cmd *cobra.Command, path string, f *inspectFlags) error {
	by, err := inspect.ParseGroupBy(f.by)
	if err != nil {
		return err
	}
	format, err := convert.ParseFormat(f.format)
	if err != nil {
		return err
	}
	experts, err := convert.ParseExpertsMode(f.experts)
	if err != nil {
		return err
	}
	opts := inspect.Options{By: by, Recipe: f.recipe, Format: format, Experts: experts, Layout: f.layout, Strict: f.strict}
	if f.partition != "" {
		if opts.PPPartition, err = layout.ParsePartition(f.partition); err != nil {
			return err
		}
	}
	if f.chart != "" {
		opts.Steps = true
		if opts.Layout == "" {
			opts.Layout = inspect.DefaultRankLayout
		}
	}
	out := cmd.OutOrStdout()
	if f.tensors {
		ck, err := safetensors.Open(path)
		if err != nil {
			return err
		}
		defer ck.Close()
		return inspect.WriteTensorList(out, ck, f.asJSON)
	}
	rep, err := inspect.Inspect(path, opts)
	if err != nil {
		return err
	}
	if f.chart != "" {
		title := fmt.Sprintf("%s: weight memory per rank under %s", rep.Source, rep.Layout.Name)
		if err := inspect.SaveChart(f.chart, title, rep.Layout.Steps); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "chart written to %s\n", f.chart)
	}
	if f.asJSON {
		return inspect.WriteJSON(out, rep)
	}
	return inspect.WriteText(out, rep)
}
