package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/internal/progress"
	"github.com/k3ckpt/k3ckpt/internal/quote"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/layout"
)

// layoutFlags are the flag values shared by shard and export, local to one
// command instance.
type layoutFlags struct {
	layout, partition, ranks, pack string
	textOnly, weightShard, vocabTP bool
	even, force, dryRun, asJSON    bool
	jobs                           int
}

func (f *layoutFlags) register(cmd *cobra.Command, withLayout bool) {
	fl := cmd.Flags()
	if withLayout {
		fl.StringVar(&f.layout, "layout", "", "layout: "+strings.Join(layout.Names(), ", ")+", or FILE.json")
		fl.StringVar(&f.ranks, "ranks", "", "ranks to write, e.g. 0,3,8-11 (default all)")
		fl.StringVar(&f.pack, "pack-scales", "", "store block-FP8 scales packed: ue8m0 (DeepGEMM SM100 layout)")
		fl.BoolVar(&f.weightShard, "weight-shard", false, "dp16 only: split the weight-shard set 8 ways (default on for dp16)")
		fl.BoolVar(&f.vocabTP, "vocab-tp", false, "dp16, dp2-dcp8 only: split embed_tokens/lm_head rows 8 ways (default on)")
	}
	fl.StringVar(&f.partition, "pp-partition", "", "layouts with pipeline stages only: layers per stage, e.g. 7,5,7,5,…,6,3 (SGLANG_PP_LAYER_PARTITION)")
	fl.BoolVar(&f.even, "even", false, "layouts with pipeline stages only: SGLang's default split (SGLANG_PP_LAYER_PARTITION unset)")
	fl.BoolVar(&f.textOnly, "text-only", false, "drop the vision tower and projector (default on for the decode layouts)")
	fl.BoolVar(&f.force, "force", false, "replace the content of existing output directories")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print what each directory would hold (from headers only), write nothing")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object (no progress display)")
	addJobsFlag(fl, &f.jobs)
}

// resolve builds the layout: a built-in with the seed script's options,
// overridden by the flags given, or a JSON file. A flag the chosen layout
// has no use for is an error, not silently dropped.
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
		if f.even {
			return nil, fmt.Errorf("--even and --pp-partition both choose the partition: give one")
		}
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
	l, err := layout.Builtin(name, m, o)
	if err != nil {
		return nil, err
	}
	if (f.partition != "" || f.even) && l.Stages() == 1 {
		flag := "--pp-partition"
		if f.even {
			flag = "--even"
		}
		return nil, fmt.Errorf("%s: layout %s has no pipeline stages (every rank holds all %d layers)", flag, name, l.Layers)
	}
	// A switch that changes nothing in this layout's rules does not apply to it.
	for _, sw := range []struct {
		flag string
		set  func(*layout.Options)
	}{
		{"weight-shard", func(o *layout.Options) { o.WeightShard = !o.WeightShard }},
		{"vocab-tp", func(o *layout.Options) { o.VocabTP = !o.VocabTP }},
		{"text-only", func(o *layout.Options) { o.TextOnly = !o.TextOnly }},
	} {
		if !fl.Changed(sw.flag) {
			continue
		}
		other := o
		sw.set(&other)
		ol, err := layout.Builtin(name, m, other)
		if err == nil && reflect.DeepEqual(ol.Rules, l.Rules) {
			return nil, fmt.Errorf("--%s has no effect on layout %s (see k3ckpt export --help for which layouts use it)", sw.flag, name)
		}
	}
	return l, nil
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
	jobs, err := resolveJobs(f.jobs)
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
	plan, err := l.Plan(src.Specs)
	if err != nil {
		return fmt.Errorf("%s: %w", srcPath, err)
	}
	sel := ranks
	if sel == nil {
		for r := range plan.Ranks() {
			sel = append(sel, r)
		}
	}
	var total int64
	for _, r := range sel {
		if r < 0 || r >= plan.Ranks() {
			return fmt.Errorf("--ranks: rank %d does not exist: layout %s has ranks 0-%d", r, l.Name, plan.Ranks()-1)
		}
		total += plan.RankBytes[r]
	}
	if f.dryRun {
		return printExportPlan(cmd, plan, dst, sel, f.asJSON)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bar := newProgress(cmd, f.asJSON, cmd.Name()+" (written)", progress.Bytes)
	bar.Start(total)
	opts := layout.ExportOptions{Ranks: ranks, Pack: pack, Jobs: jobs, Force: f.force}
	if bar != nil {
		opts.Progress = bar.Add
	}
	start := time.Now()
	res, err := layout.Export(ctx, src, l, dst, opts)
	bar.Finish()
	if err != nil {
		return err
	}
	took := time.Since(start)
	if f.asJSON {
		type rank struct {
			Dir     string `json:"dir"`
			Rank    int    `json:"rank"`
			Stage   int    `json:"stage"`
			Layers  [2]int `json:"layers"`
			Tensors int    `json:"tensors"`
			Bytes   int64  `json:"bytes"`
		}
		rs := make([]rank, len(res.Ranks))
		for i, rr := range res.Ranks {
			rs[i] = rank{res.Dirs[i], rr.Rank, rr.Stage, rr.Layers, rr.Tensors, rr.Bytes}
		}
		return writeJSON(cmd.OutOrStdout(), map[string]any{
			"layout": l.Name, "dst": dst, "ranks": rs, "files": res.Files, "bytes": res.Bytes,
			"dropped_tensors": len(res.Plan.Dropped), "dropped_bytes": res.Plan.DroppedBytes,
			"unaligned_scales": nonNil(res.Unaligned), "seconds": took.Seconds(),
		})
	}
	printExport(summary(cmd), res, took)
	return nil
}

// printExportPlan is --dry-run: what every selected directory would hold,
// from the headers alone.
func printExportPlan(cmd *cobra.Command, p *layout.Plan, dst string, ranks []int, asJSON bool) error {
	l := p.Layout
	type rank struct {
		Dir     string `json:"dir"`
		Rank    int    `json:"rank"`
		Stage   int    `json:"stage"`
		Layers  [2]int `json:"layers"`
		Tensors int    `json:"tensors"`
		Bytes   int64  `json:"bytes"`
	}
	rows := make([]rank, 0, len(ranks))
	var total int64
	for _, r := range ranks {
		st := r / l.RanksPerStage
		lo, hi := 0, l.Layers
		if len(l.Partition) > 0 {
			lo = 0
			for _, n := range l.Partition[:st] {
				lo += n
			}
			hi = lo + l.Partition[st]
		}
		rows = append(rows, rank{filepath.Join(dst, layout.DirName(l, r)), r, st, [2]int{lo, hi}, p.RankPieces[r], p.RankBytes[r]})
		total += p.RankBytes[r]
	}
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), map[string]any{
			"dry_run": true, "layout": l.Name, "dst": dst, "ranks": rows, "bytes": total,
			"dropped_tensors": len(p.Dropped), "dropped_bytes": p.DroppedBytes, "unaligned_scales": nonNil(p.Unaligned),
		})
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "dry run: %s would write %s under %s (%.3f GiB of tensors); nothing written\n",
		cmd.Name(), termtext.Plural(int64(len(rows)), "directory", "directories"), dst, gib(total))
	fmt.Fprintf(w, "%-10s %6s %7s %9s %11s\n", "dir", "stage", "layers", "tensors", "GiB")
	for _, r := range rows {
		fmt.Fprintf(w, "%-10s %6d %7s %9s %11.3f\n", filepath.Base(r.Dir), r.Stage, fmt.Sprintf("%d-%d", r.Layers[0], r.Layers[1]-1),
			termtext.Int(int64(r.Tensors)), gib(r.Bytes))
	}
	if len(p.Dropped) > 0 {
		fmt.Fprintf(w, "dropped: %s (%.3f GiB)\n", termtext.Plural(int64(len(p.Dropped)), "tensor", "tensors"), gib(p.DroppedBytes))
	}
	if len(p.Unaligned) > 0 {
		fmt.Fprintf(w, "%s split across a 128 block would keep their scales replicated, e.g. %s\n",
			termtext.Plural(int64(len(p.Unaligned)), "block-FP8 weight", "block-FP8 weights"), quote.Name(p.Unaligned[0]))
	}
	fmt.Fprintln(w, "not checked by a dry run: the checks that read tensor data (dropped padding is zero, scales fit the packing)")
	return nil
}

func printExport(w io.Writer, res *layout.ExportResult, took time.Duration) {
	p := res.Plan
	l := p.Layout
	fmt.Fprintf(w, "%s: %s", l.Name, termtext.Plural(int64(p.Ranks()), "rank", "ranks"))
	if l.Stages() > 1 {
		fmt.Fprintf(w, " in %d stages %v", l.Stages(), l.Partition)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-10s %7s %9s %11s\n", "dir", "layers", "tensors", "GiB")
	for i, rr := range res.Ranks {
		fmt.Fprintf(w, "%-10s %7s %9s %11.3f\n", filepath.Base(res.Dirs[i]), fmt.Sprintf("%d-%d", rr.Layers[0], rr.Layers[1]-1),
			termtext.Int(int64(rr.Tensors)), gib(rr.Bytes))
	}
	if len(p.Dropped) > 0 {
		fmt.Fprintf(w, "dropped %s (%.3f GiB)\n", termtext.Plural(int64(len(p.Dropped)), "tensor", "tensors"), gib(p.DroppedBytes))
	}
	if len(res.Unaligned) > 0 {
		fmt.Fprintf(w, "%s split across a 128 block keep their scale replicated, e.g. %s\n",
			termtext.Plural(int64(len(res.Unaligned)), "block-FP8 weight", "block-FP8 weights"), quote.Name(res.Unaligned[0]))
	}
	secs := took.Seconds()
	fmt.Fprintf(w, "wrote %s, %.3f GiB in %.2fs (%.0f MiB/s)\n", termtext.Plural(int64(res.Files), "file", "files"), gib(res.Bytes), secs, mib(res.Bytes)/max(secs, 1e-9))
}

func newReassembleCmd() *cobra.Command {
	var check string
	var force, asJSON, dryRun bool
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
			jobs, err := resolveJobs(jobs)
			if err != nil {
				return err
			}
			if dryRun {
				return fmt.Errorf("reassemble --dry-run: not available; layout plans a reassembly only while writing it (inspect the export with: k3ckpt inspect %s)", args[0])
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			bar := newProgress(cmd, asJSON, "reassemble (written)", progress.Bytes)
			opts := layout.ReassembleOptions{Jobs: jobs, Force: force}
			if bar != nil {
				opts.Progress = bar.Add
			}
			start := time.Now()
			res, err := layout.Reassemble(ctx, args[0], args[1], opts)
			bar.Finish()
			if err != nil {
				return err
			}
			took := time.Since(start)
			out := map[string]any{"out": args[1], "files": res.Files, "bytes": res.Bytes, "missing": nonNil(res.Missing), "seconds": took.Seconds()}
			w := summary(cmd)
			if !asJSON {
				fmt.Fprintf(w, "rebuilt %s, %.3f GiB in %.2fs\n", termtext.Plural(int64(res.Files), "file", "files"), gib(res.Bytes), took.Seconds())
				if len(res.Missing) > 0 {
					fmt.Fprintf(w, "%s dropped by the layout (e.g. %s); their files lack them\n",
						termtext.Plural(int64(len(res.Missing)), "source tensor was", "source tensors were"), quote.Name(res.Missing[0]))
				}
			}
			if check != "" {
				n, tensors, err := compareTrees(ctx, check, args[1])
				if err != nil {
					return err
				}
				out["check"] = map[string]any{"against": check, "tensors": tensors, "bytes": n, "identical": true}
				if !asJSON {
					fmt.Fprintf(w, "check: %s, %.3f GiB byte-identical to %s\n", termtext.Plural(int64(tensors), "tensor", "tensors"), gib(n), check)
				}
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&check, "check", "", "compare every rebuilt tensor with this source checkpoint")
	fl.BoolVar(&force, "force", false, "replace the content of an existing OUT")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object (no progress display)")
	fl.BoolVar(&dryRun, "dry-run", false, "plan only, write nothing (reassemble cannot plan without writing yet: exits with an error)")
	addJobsFlag(fl, &jobs)
	return cmd
}

// compareTrees is reassemble --check: every tensor of b against a, byte for byte.
func compareTrees(ctx context.Context, aPath, bPath string) (int64, int, error) {
	a, err := layout.OpenSource(aPath)
	if err != nil {
		return 0, 0, err
	}
	defer a.Close()
	b, err := layout.OpenSource(bPath)
	if err != nil {
		return 0, 0, err
	}
	defer b.Close()
	n, err := layout.Compare(ctx, a, b)
	if err != nil {
		return 0, 0, err
	}
	return n, len(b.Specs), nil
}
