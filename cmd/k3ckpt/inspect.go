package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/inspect"
	"github.com/k3ckpt/k3ckpt/layout"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

type inspectFlags struct {
	by, recipe, format, layout, partition, chart, gpuMem string
	experts                                              string
	asJSON, tensors, strict, wide                        bool
}

func newInspectCmd() *cobra.Command {
	var f inspectFlags
	cmd := &cobra.Command{
		Use:   "inspect PATH|URL",
		Short: "Audit a checkpoint from its headers: GiB per component, dtype, layer, file, stage and rank",
		Long: `inspect reads only the safetensors headers, config.json and the index (never
tensor data) of a checkpoint directory, index file, single file or http(s) URL,
and accounts its tensors and bytes (1 GiB = 2^30 bytes).

  --by component|dtype|layer|stage|rank|file   main table (default component;
                    stage and rank need --layout)
  --recipe NAME     also account the checkpoint the recipe would produce, before → after
  --experts MODE    ... with the routed experts as convert --experts MODE writes them:
                    nvfp4, bf16, fp8 or mxfp4 (alone or with --recipe; --layout too)
  --layout NAME     per-rank (and per-stage) resident bytes: ` + strings.Join(layout.Names(), ", ") + ` or FILE.json
  --chart FILE.svg  per-rank memory step by step (BF16 → text only → FP8 → weight shard → vocab TP8)
  --tensors         list every tensor (name, dtype, shape, file, data_offsets)

Tables fit $COLUMNS, else the terminal, else 80 columns: the smallest components
share an "other" column and wide tables leave out the exact byte counts (--json
has them); --wide gives every component a column and every table its bytes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInspect(cmd, args[0], &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.by, "by", "component", "group by component|dtype|layer|stage|rank|file (stage, rank: with --layout)")
	fl.StringVar(&f.recipe, "recipe", "", "what-if: account the output of this convert recipe ("+strings.Join(convert.RecipeNames(), ", ")+")")
	fl.StringVar(&f.format, "format", model.ModelOpt.String(), "with --recipe: scale convention of its output (modelopt|deepseek|compressed-tensors)")
	fl.StringVar(&f.experts, "experts", convert.ExpertsKeep.String(), "what-if for the routed experts, as convert --experts writes them: keep, nvfp4, bf16, fp8 or mxfp4 (alone or with --recipe; per rank and stage with --layout)")
	fl.StringVar(&f.layout, "layout", "", "per-rank/per-stage bytes under a layout: built-in name or FILE.json")
	fl.StringVar(&f.partition, "pp-partition", "", "with a --layout that has pipeline stages: layers per stage, e.g. 7,5,7,5,…,6,3")
	fl.StringVar(&f.chart, "chart", "", "write the per-rank memory steps of --layout (default "+inspect.DefaultRankLayout+") as a chart: FILE.svg, .png or .pdf")
	fl.StringVar(&f.gpuMem, "gpu-mem", "", "with --chart: draw a GPU capacity line, e.g. 141GiB or 80GB")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object instead of tables")
	fl.BoolVar(&f.tensors, "tensors", false, "list every tensor instead of the accounting")
	fl.BoolVar(&f.strict, "strict", false, "fail when a tensor's shape disagrees with config.json")
	fl.BoolVar(&f.wide, "wide", false, "tables with a column per component and exact bytes, however wide")
	return cmd
}

// checkInspectFlags turns combinations the command would otherwise ignore
// into errors that say what to do instead.
func checkInspectFlags(cmd *cobra.Command, f *inspectFlags) error {
	changed := cmd.Flags().Changed
	if f.tensors {
		for _, n := range []string{"by", "recipe", "format", "experts", "layout", "pp-partition", "chart", "gpu-mem", "strict", "wide"} {
			if changed(n) {
				return fmt.Errorf("--tensors lists the tensors as stored; it does not combine with --%s (drop one of them)", n)
			}
		}
		return nil
	}
	if changed("format") && f.recipe == "" {
		return fmt.Errorf("--format is the scale convention of a --recipe's output: add --recipe NAME (%s)", strings.Join(convert.RecipeNames(), ", "))
	}
	if (f.by == "rank" || f.by == "stage") && f.layout == "" {
		return fmt.Errorf("--by %s needs a layout to place tensors on %ss: add --layout NAME (%s, or FILE.json)", f.by, f.by, strings.Join(layout.Names(), ", "))
	}
	if f.partition != "" && f.layout == "" {
		return fmt.Errorf("--pp-partition splits the layers of a --layout's pipeline stages: add --layout NAME (e.g. pp16)")
	}
	if f.gpuMem != "" && f.chart == "" {
		return fmt.Errorf("--gpu-mem draws a line on the chart: add --chart FILE.svg")
	}
	return nil
}

func runInspect(cmd *cobra.Command, path string, f *inspectFlags) error {
	if err := checkInspectFlags(cmd, f); err != nil {
		return err
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
	opts := inspect.Options{Recipe: f.recipe, Layout: f.layout, Strict: f.strict, Chart: f.chart}
	var err error
	if opts.By, err = inspect.ParseGroupBy(f.by); err != nil {
		return err
	}
	if opts.Format, err = convert.ParseFormat(f.format); err != nil {
		return flagError("format", err)
	}
	if err := opts.Experts.UnmarshalText([]byte(f.experts)); err != nil {
		return flagError("experts", err)
	}
	if err := checkOptionPairs(convert.Options{Format: opts.Format, Experts: opts.Experts}); err != nil {
		return err
	}
	var capacity int64
	if f.gpuMem != "" {
		if capacity, err = parseSize(f.gpuMem); err != nil {
			return fmt.Errorf("--gpu-mem: %w", err)
		}
	}
	if f.partition != "" {
		if opts.PPPartition, err = layout.ParsePartition(f.partition); err != nil {
			return err
		}
	}
	rep, err := inspect.Inspect(path, opts)
	if err != nil {
		return err
	}
	if f.partition != "" && rep.Layout != nil && len(rep.Layout.Stages) < 2 {
		return fmt.Errorf("--pp-partition: layout %s has no pipeline stages (every rank holds every layer)", rep.Layout.Name)
	}
	if f.chart != "" {
		if err := inspect.SaveChart(f.chart, rep, capacity); err != nil {
			return err
		}
		if !quiet(cmd) {
			fmt.Fprintf(cmd.ErrOrStderr(), "chart written to %s\n", f.chart)
		}
	}
	if f.asJSON {
		return writeJSON(out, rep)
	}
	return inspect.WriteText(out, rep, termWidth(cmd), f.wide)
}
