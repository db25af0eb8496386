package main

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/objstore"
	"github.com/k3ckpt/k3ckpt/internal/remote"
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

func newReassembleCmd() *cobra.Command {
	var check string
	var rf runFlags
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
			if check != "" && !remote.IsRemote(check) && !objstore.IsURL(args[1]) {
				if err := fsx.Disjoint(args[1], check); err != nil {
					return fmt.Errorf("--check: %w", err)
				}
			}
			defer limitToSource(args[0])()
			if check != "" && !rf.dryRun && (!remote.IsRemote(args[0]) || objstore.IsURL(args[0])) {
				// Every file of DST against the sums its run took as it
				// streamed out, before OUT is written: the reassembly reads
				// only the tensors and the first directory's side files.
				files, bytes, err := layout.CheckSums(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if !rf.asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "check: %d files of %s, %.3f GiB, match their SHA256SUMS\n", files, args[0], gib(bytes))
				}
			}
			src, err := layout.OpenSource(args[0])
			if err != nil {
				return err
			}
			defer src.Close()
			plan, err := layout.PlanReassemble(src)
			if err != nil {
				return err
			}
			if err := runPlan(cmd, plan, args[1], &rf, nil, 0); err != nil || check == "" || rf.dryRun {
				return err
			}
			a, err := layout.OpenSource(check)
			if err != nil {
				return err
			}
			defer a.Close()
			b, _, err := openLayoutSource(cmd, args[1], remote.DefaultConnections)
			if err != nil {
				return err
			}
			defer b.Close()
			n, err := layout.Compare(cmd.Context(), a, b)
			if err != nil {
				return err
			}
			if !rf.asJSON {
				fmt.Fprintf(cmd.OutOrStdout(), "check: %d tensors, %.3f GiB byte-identical to %s\n", len(b.Specs), gib(n), check)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&check, "check", "", "compare every rebuilt tensor with this source checkpoint")
	rf.register(cmd)
	return cmd
}

// layoutFlags are the flag values shared by shard and export.
type layoutFlags struct {
	layout, partition, ranks, pack string
	textOnly, weightShard, vocabTP bool
	even                           bool
	connections                    int
	run                            runFlags
}

// runFlags are the flags of every command that writes a layout plan.
type runFlags struct {
	dryRun, asJSON, restart, noSpaceCheck bool
	stateDir                              string
	jobs                                  int
}

func (r *runFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&r.dryRun, "dry-run", false, "print the plan (and run its data checks), write nothing")
	fl.BoolVar(&r.asJSON, "json", false, "print the plan or the result as one JSON object")
	fl.BoolVar(&r.restart, "restart", false, "discard what an earlier run left in DST instead of resuming it")
	fl.BoolVar(&r.noSpaceCheck, "no-space-check", false, "do not compare what the run writes with DST's free space")
	fl.BoolVar(&r.restart, "force", false, "same as --restart")
	fl.MarkDeprecated("force", "use --restart")
	stateDirFlag(fl, &r.stateDir)
	addJobsFlag(fl, &r.jobs)
}

func (f *layoutFlags) register(cmd *cobra.Command, withLayout bool) {
	fl := cmd.Flags()
	connectionsFlag(fl, &f.connections)
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
	f.run.register(cmd)
}

// resolve builds the layout: a built-in with its default options overridden
// by the flags given, or a JSON file. A flag it has no use for is an error.
func (f *layoutFlags) resolve(cmd *cobra.Command, name string, src *layout.Source) (*layout.Layout, error) {
	o, err := layout.DefaultOptions(name)
	builtin := err == nil
	fl := cmd.Flags()
	switches := []struct {
		flag  string
		value bool
		field *bool
	}{{"weight-shard", f.weightShard, &o.WeightShard}, {"vocab-tp", f.vocabTP, &o.VocabTP}, {"text-only", f.textOnly, &o.TextOnly}}
	for _, sw := range switches {
		if fl.Changed(sw.flag) {
			*sw.field = sw.value
		}
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
	l, err := layout.Resolve(name, m, o)
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
	for _, sw := range switches {
		if !fl.Changed(sw.flag) {
			continue
		}
		*sw.field = !*sw.field
		ol, err := layout.Resolve(name, m, o)
		*sw.field = !*sw.field
		if err == nil && reflect.DeepEqual(ol.Rules, l.Rules) {
			return nil, fmt.Errorf("--%s has no effect on layout %s (see k3ckpt export --help for which layouts use it)", sw.flag, name)
		}
	}
	return l, nil
}

func runExport(cmd *cobra.Command, srcPath, dst, name string, f *layoutFlags) error {
	defer limitToSource(srcPath)()
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
	src, net, err := openLayoutSource(cmd, srcPath, f.connections)
	if err != nil {
		return err
	}
	defer src.Close()
	l, err := f.resolve(cmd, name, src)
	if err != nil {
		return err
	}
	plan, err := layout.PlanExport(src, l, layout.ExportOptions{Ranks: ranks, Pack: pack})
	if err != nil {
		return err
	}
	return runPlan(cmd, plan, dst, &f.run, net, f.connections)
}

// writeLayoutPlan prints an export plan under the name of the command that
// runs it: shard is an export of layout pp16, and its summary says "shard".
func writeLayoutPlan(cmd *cobra.Command, w io.Writer, plan *layout.Plan) error {
	var b strings.Builder
	if err := plan.WriteText(&b); err != nil {
		return err
	}
	text := b.String()
	if cmd.Name() == "shard" && strings.HasPrefix(text, "export ") {
		text = "shard " + text[len("export "):]
	}
	_, err := io.WriteString(w, text)
	return err
}

// runPlan prints the plan (--dry-run, after its data checks) or executes it
// and prints what was written.
func runPlan(cmd *cobra.Command, plan *layout.Plan, dst string, rf *runFlags, net *netMeter, conns int) error {
	w := cmd.OutOrStdout()
	jobs, err := resolveJobs(rf.jobs, 0)
	if err != nil {
		return err
	}
	ctx := cmd.Context() // cancelled by a stop signal (see catchSignals)
	if rf.dryRun {
		if err := plan.Validate(ctx); err != nil {
			return err
		}
		if rf.asJSON {
			return writeJSON(w, map[string]any{"dry_run": true, "plan": plan})
		}
		return writeLayoutPlan(cmd, w, plan)
	}
	// The heap is bounded as for convert, so that the fetch and upload garbage,
	// which grows with the files' size, is collected instead of doubling it.
	tensors := 0
	for _, d := range plan.Dirs {
		tensors += d.Tensors
	}
	setMemoryLimit(jobs, tensors)
	start := time.Now()
	// Execute starts a local bar once it knows what this run writes (a
	// resumed run keeps files), so total and ETA are this run's.
	bar, stop := net.startProgress(cmd, rf.asJSON, cmd.Name()+" (written)", plan.FetchBytes())
	res, err := plan.Execute(ctx, dst, layout.ExecOptions{Jobs: jobs, Restart: rf.restart, NoSpaceCheck: rf.noSpaceCheck,
		Connections: conns, StateDir: rf.stateDir, Progress: bar})
	stop()
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	nr := net.report(res.Network, net.received())
	if rf.asJSON {
		v := map[string]any{"plan": plan, "result": res, "seconds": secs}
		if nr != nil {
			v["network"] = nr
		}
		return writeJSON(w, v)
	}
	w = summary(cmd)
	if err := writeLayoutPlan(cmd, w, plan); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %d files, %.3f GiB in %.2fs (%.0f MiB/s)", res.Written, gib(res.Bytes), secs, mib(res.Bytes)/max(secs, 1e-9))
	if res.Kept > 0 {
		fmt.Fprintf(w, "; kept %d files of an earlier run", res.Kept)
	}
	if res.Changed > 0 {
		fmt.Fprintf(w, "; %d files modified since an earlier run committed them were written again", res.Changed)
	}
	fmt.Fprintln(w)
	nr.print(w)
	return nil
}
