package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/engines"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
)

type convertFlags struct {
	recipe, format, scaleFmt, nonFinite, worker string
	experts, numerics                           string
	jobs, connections                           int
	resume, restart, noSpaceCheck, dryRun, json bool
	stateDir, target                            string
	force                                       bool // with --target
}

func newConvertCmd() *cobra.Command {
	var fl convertFlags
	cmd := &cobra.Command{
		Use:   "convert SRC DST",
		Short: "Convert a checkpoint to block-FP8 (ModelOpt layout by default; optional NVFP4 experts) by streaming, atomically and resumably",
		Long: `convert plans the whole conversion from headers and config.json (which tensors
are copied, quantized to 128×128 block-FP8 with their scales, or dropped; every
file, offset and config), then carries it out: copied tensors move by byte
range, quantized ones stream in 128-row bands, every file appears under its
final name only when complete and synced. Running the same command again on
a DST that holds the same plan (after a crash, kill -9 or Ctrl-C) resumes:
finished files are checked against their recorded sha256 and kept, the rest
is redone; --restart writes everything again. Before the first byte the
planned output size is compared with DST's free space.
--worker I/N converts a deterministic 1/N of the files (one worker per machine
on shared storage); the last worker to finish, or 'k3ckpt merge DST', writes
the index, config and manifest. A conversion with a lossy step (FP8, NVFP4,
MXFP4) also writes quantization_report.json: per tensor group the max abs
error, relative Frobenius error, SQNR and lossy blocks of x̂ (the output as
engines dequantize it) against the source, listed in the manifest.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error { return runConvert(cmd, args[0], args[1], fl) },
	}
	f := cmd.Flags()
	f.StringVar(&fl.recipe, "recipe", convert.AttnMoEDenseFP8, "conversion recipe ("+strings.Join(convert.RecipeNames(), ", ")+")")
	f.StringVar(&fl.format, "format", model.ModelOpt.String(), "scale/config convention: modelopt (ModelOpt mixed precision, what K3 engines load), deepseek or compressed-tensors (see docs/COMPATIBILITY.md)")
	f.StringVar(&fl.experts, "experts", convert.ExpertsKeep.String(), "routed experts: keep (bytes unchanged), nvfp4 (NVIDIA's MXFP4→NVFP4 cast; --format modelopt), bf16 (MXFP4/NVFP4/FP8 decoded to BF16, as torch computes it), mxfp4 (BF16 packed into the release's compressed-tensors mxfp4-pack-quantized, byte for byte as compressed-tensors does) or fp8 (MXFP4/BF16 experts to 128×128 block FP8 in --format, --numerics deepgemm; for Hopper, but no engine's K3 loader is known to serve them: SGLang and vLLM load them by name under --format deepseek with their SiTU FP8 MoE path unread, TensorRT-LLM refuses them; see convert/README.md)")
	f.StringVar(&fl.numerics, "numerics", quant.DeepGEMM.String(), "block-FP8 cast: deepgemm (per_block_cast_to_fp8) or modelopt (ModelOpt FP8_PB_WO, as nvidia/Kimi-K3-NVFP4)")
	f.StringVar(&fl.scaleFmt, "scale-fmt", "fp32", "block scales: fp32 (amax/448) or ue8m0 (rounded up to powers of two, declared in the config)")
	f.StringVar(&fl.nonFinite, "nonfinite", "error", "NaN/Inf in a weight to quantize: error, or zero (replace by 0 and report the count)")
	addJobsFlag(f, &fl.jobs)
	f.BoolVar(&fl.resume, "resume", false, "keep files already finished whose size and sha256 match their record (the default; the explicit form)")
	f.BoolVar(&fl.restart, "restart", false, "discard what an earlier run of this plan left in DST and write every file again")
	f.BoolVar(&fl.noSpaceCheck, "no-space-check", false, "do not compare the planned output size with DST's free space")
	f.StringVar(&fl.worker, "worker", "", "convert only slice I of N (0-based), e.g. 3/8")
	f.BoolVar(&fl.dryRun, "dry-run", false, "print the plan and the output sizes, write nothing")
	f.BoolVar(&fl.json, "json", false, "print one JSON object (no progress display)")
	connectionsFlag(f, &fl.connections)
	stateDirFlag(f, &fl.stateDir)
	f.StringVar(&fl.target, "target", "", "ENGINE[/GPU] ("+strings.Join(engines.EngineNames(), ", ")+"; sm90 or sm100, default both): choose --format, --recipe, --experts and --numerics for what that engine keeps most of resident (docs/COMPATIBILITY.md)")
	f.BoolVar(&fl.force, "force", false, "write a combination the engine rules say the --target engine refuses or loads wrong")
	return cmd
}

func newMergeCmd() *cobra.Command {
	var asJSON, dryRun bool
	var stateDir string
	cmd := &cobra.Command{
		Use:   "merge DST",
		Short: "Finish a multi-worker conversion: write the index, config and manifest once every slice is done",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dryRun {
				st, err := convert.StatusOfMerge(args[0], stateDir)
				if err != nil {
					return err
				}
				if asJSON {
					err = writeJSON(cmd.OutOrStdout(), st)
				} else {
					_, err = fmt.Fprintln(cmd.OutOrStdout(), st)
				}
				if err == nil && !st.Ready && !st.Finalized {
					why := fmt.Sprintf("%d of %d files missing", len(st.Missing), len(st.Done)+len(st.Missing))
					if st.Running != "" {
						why += ", worker " + st.Running + " still running"
					}
					return fmt.Errorf("merge %s would refuse (%s): %w", args[0], why, convert.ErrIncomplete)
				}
				return err
			}
			m, err := convert.Finalize(args[0], stateDir)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"dst": args[0], "plan": m.Plan, "manifest": convert.ManifestName, "files": len(m.Files)})
			}
			fmt.Fprintf(summary(cmd), "merged %s: manifest %s lists %s (plan %.12s)\n", args[0], convert.ManifestName,
				termtext.Plural(int64(len(m.Files)), "file", "files"), m.Plan)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	stateDirFlag(cmd.Flags(), &stateDir)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say which files are done and missing and what merge would write, changing nothing (exit 1 when merge would refuse)")
	return cmd
}

func parseWorker(s string) (int, int, error) {
	if s == "" {
		return 0, 1, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || convert.CheckWorker(i, n) != nil {
		return 0, 0, fmt.Errorf("%w: --worker %q (want I/N with 0 ≤ I < N ≤ %d)", convert.ErrWorker, s, convert.MaxWorkers)
	}
	return i, n, nil
}

// checkOptionPairs refuses, in the flags' terms, the combinations the
// converter cannot carry out, before anything is opened: the library says
// only that a format is unknown.
func checkOptionPairs(o convert.Options) error {
	if o.Experts == convert.ExpertsNVFP4 && o.Format != model.ModelOpt {
		return fmt.Errorf("--experts nvfp4 does not combine with --format %s: only --format %s describes NVFP4 experts (ModelOpt's hf_quant_config); use --format %[2]s or keep the experts MXFP4 (drop --experts)",
			o.Format, model.ModelOpt)
	}
	if o.Numerics == quant.ModelOpt && o.ScaleFmt != quant.ScaleFP32 {
		return fmt.Errorf("--numerics modelopt does not combine with --scale-fmt %s: ModelOpt's block scales are BF16 values, stored as %s; use --scale-fmt %[2]s or --numerics %s",
			o.ScaleFmt, quant.ScaleFP32, quant.DeepGEMM)
	}
	return nil
}

func runConvert(cmd *cobra.Command, srcPath, dst string, fl convertFlags) error {
	defer limitToSource(srcPath)()
	r, err := convert.Lookup(fl.recipe)
	if err != nil {
		return err
	}
	var opts convert.Options
	if opts.Format, err = convert.ParseFormat(fl.format); err != nil {
		return flagError("format", err)
	}
	if opts.ScaleFmt, err = convert.ParseScaleFmt(fl.scaleFmt); err != nil {
		return flagError("scale-fmt", err)
	}
	if err = opts.NonFinite.UnmarshalText([]byte(fl.nonFinite)); err != nil {
		return flagError("nonfinite", err)
	}
	if err = opts.Experts.UnmarshalText([]byte(fl.experts)); err != nil {
		return flagError("experts", err)
	}
	if opts.Numerics, err = convert.ParseNumerics(fl.numerics); err != nil {
		return flagError("numerics", err)
	}
	if err := checkOptionPairs(opts); err != nil {
		return err
	}
	wi, wn, err := parseWorker(fl.worker)
	if err != nil {
		return err
	}
	jobs, err := resolveJobs(fl.jobs, convert.MaxJobs)
	if err != nil {
		return err
	}
	if fl.resume && fl.restart {
		return fmt.Errorf("--resume and --restart exclude each other")
	}
	planMemory(srcPath)
	back := r.Name == convert.BF16 || opts.Experts == convert.ExpertsBF16 || opts.Experts == convert.ExpertsMXFP4
	if _, err := os.Stat(filepath.Join(srcPath, convert.ManifestName)); err == nil && !back {
		return fmt.Errorf("%s is already a k3ckpt conversion (it holds %s): convert reads the original checkpoint", srcPath, convert.ManifestName)
	}
	src, net, err := openSource(cmd, srcPath, fl.connections)
	if err != nil {
		return err
	}
	defer src.Close()
	if src.NumTensors() < smallPlanTensors { // the plan stays small
		gcPace(100)
	}
	if r, opts, err = applyTarget(cmd, src, &fl, r, opts); err != nil {
		return err
	}
	p, err := convert.NewPlan(src, nil, r, opts)
	if err != nil {
		return err
	}
	if err := checkPlanEngines(cmd, p, &fl); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if fl.dryRun {
		return printPlan(cmd, out, p, fl.json)
	}
	if verbose(cmd) && !fl.json {
		if err := printPlan(cmd, cmd.ErrOrStderr(), p, false); err != nil {
			return err
		}
	}
	setMemoryLimit(jobs, src.NumTensors())
	if p.AuxUnlisted {
		warn(cmd, "%s cannot be listed over https://: side files (tokenizer, code) are not copied; use hf://org/name to get them", srcPath)
	}
	worker, label := "", "convert (read + written)"
	if wn > 1 {
		worker = fmt.Sprintf(" (worker %d of %d)", wi, wn)
		label = fmt.Sprintf("convert worker %d of %d (read + written)", wi, wn)
	}
	bar, stop := net.startProgress(cmd, fl.json, label, p.FetchBytes)
	start := time.Now()
	// The context is cancelled by a stop signal (see catchSignals).
	res, err := convert.Execute(cmd.Context(), p, dst, convert.ExecOptions{Jobs: jobs, Resume: !fl.restart, Restart: fl.restart, Worker: wi, Workers: wn,
		NoSpaceCheck: fl.noSpaceCheck, Connections: fl.connections, StateDir: fl.stateDir, Progress: bar})
	stop()
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	t := p.Totals
	nr := net.report(res.Network, src.BytesFetched())
	if fl.json {
		pk, fe := res.Pack, res.FP8Experts
		v := map[string]any{
			"plan": p.ID, "recipe": r.Name, "format": opts.Format, "scale_fmt": opts.ScaleFmt.String(),
			"worker": wi, "workers": wn, "written": nonNil(res.Written), "skipped": nonNil(res.Skipped),
			"experts": opts.Experts, "numerics": opts.Numerics.String(),
			"finalized": res.Finalized, "zeroed_nonfinite": res.ZeroedNonFinite, "engines": engineReport(p),
			"fp8_zero_scale_blocks": res.ZeroScaleBlocks, "nvfp4_cast": res.Cast, "uncounted_files": res.Uncounted,
			"decoded": res.Decoded, "decoded_nan": res.DecodedNaN, "packed": res.Packed,
			"mxfp4_pack":   map[string]int64{"groups": pk.Groups, "lossy": pk.Lossy, "saturated": pk.Saturated, "zero_groups": pk.ZeroGroups},
			"mxfp4_repack": map[string]int64{"groups": res.Repack.Groups, "changed": res.Repack.Changed},
			"fp8_experts":  map[string]int64{"tensors": fe.Tensors, "blocks": fe.Blocks, "lossless": fe.Blocks - fe.Lossy, "lossy": fe.Lossy},
			"seconds":      elapsed.Seconds(), "source_bytes": t.SourceBytes, "output_bytes": t.OutputBytes,
		}
		if nr != nil {
			v["network"] = nr
		}
		if res.Report != nil {
			v["quantization_report"] = res.Report
		}
		return writeJSON(out, v)
	}
	if res.ZeroedNonFinite > 0 { // a warning, printed even under -q
		warn(cmd, "%s replaced by 0 (--nonfinite zero)",
			termtext.Plural(res.ZeroedNonFinite, "NaN/Inf source value was", "NaN/Inf source values were"))
	}
	sw := summary(cmd)
	if verbose(cmd) {
		for _, n := range res.Written {
			fmt.Fprintln(sw, "written", termtext.Name(n))
		}
		for _, n := range res.Skipped {
			fmt.Fprintln(sw, "kept (already done, hash checked)", termtext.Name(n))
		}
	}
	fmt.Fprintf(sw, "convert %s → %s%s: %s written, %s already done and kept, in %s\n",
		srcPath, dst, worker, termtext.Plural(int64(len(res.Written)), "file", "files"),
		termtext.Plural(int64(len(res.Skipped)), "file", "files"), elapsed.Round(time.Millisecond))
	nr.print(sw)
	if res.ZeroScaleBlocks > 0 {
		fmt.Fprintf(sw, "note: %d FP8 blocks got scale 0 and NaN codes (all-zero tiles under --numerics modelopt, as NVIDIA's converter writes them)\n", res.ZeroScaleBlocks)
	}
	switch {
	case opts.Experts != convert.ExpertsNVFP4:
	case res.Cast.Blocks == 0 && res.Uncounted > 0:
		fmt.Fprintf(sw, "MXFP4→NVFP4 cast: not counted; the %s kept from a finished conversion (k3ckpt verify re-casts and counts every file)\n",
			termtext.Plural(int64(res.Uncounted), "file was", "files were"))
	default:
		fmt.Fprintln(sw, castLine(castScope(res), res.Cast))
	}
	if res.Decoded > 0 {
		fmt.Fprintf(sw, "decoded %s to BF16 (codes × scales in float32, one rounding, as torch)\n", termtext.Plural(int64(res.Decoded), "quantized tensor", "quantized tensors"))
	}
	if r := res.Repack; r.Changed > 0 {
		fmt.Fprintf(sw, "%s of %s MXFP4 groups would repack (--experts mxfp4) to other bytes, every value the same: their scale byte is not compressed-tensors' pick, or they hold −0 codes\n",
			termtext.Int(r.Changed), termtext.Int(r.Groups))
	}
	if res.DecodedNaN > 0 {
		warn(cmd, "%s in the BF16 output, as torch computes them (NaN codes; under ModelOpt numerics an all-zero tile is NaN codes × scale 0)",
			termtext.Plural(res.DecodedNaN, "value is NaN", "values are NaN"))
	}
	if p := res.Pack; res.Packed > 0 {
		line := fmt.Sprintf("packed %s to MXFP4 (compressed-tensors' rule): %d groups of 32, %d whose values did not come back exactly (their bytes cannot be the source's), %d elements saturated, %d all-zero groups",
			termtext.Plural(int64(res.Packed), "tensor", "tensors"), p.Groups, p.Lossy, p.Saturated, p.ZeroGroups)
		if p.Lossy > 0 {
			line = "warning: " + line
		}
		fmt.Fprintln(sw, line)
	}
	if s := res.FP8Experts; opts.Experts == convert.ExpertsFP8 {
		line := fmt.Sprintf("experts to block FP8: %s, %s blocks of 128×128, %s lossless, %s lossy (some value changed)",
			termtext.Plural(s.Tensors, "tensor", "tensors"), termtext.Int(s.Blocks), termtext.Int(s.Blocks-s.Lossy), termtext.Int(s.Lossy))
		if s.Lossy > 0 && opts.ScaleFmt != quant.ScaleUE8M0 {
			line = "warning: " + line + "; --scale-fmt ue8m0 keeps the blocks whose E8M0 group scales an E4M3 code can span lossless"
		} else if s.Lossy > 0 {
			line = "warning: " + line + ": an E4M3 code under one block scale cannot span those blocks' E8M0 group scales"
		}
		fmt.Fprintln(sw, line)
	}
	if res.Finalized {
		what := termtext.Plural(int64(t.Quantized), "tensor", "tensors") + " quantized"
		if t.Decoded > 0 || t.Packed > 0 {
			what += fmt.Sprintf(", %d decoded to BF16, %d packed to MXFP4", t.Decoded, t.Packed)
		}
		fmt.Fprintf(sw, "done: %s, %.2f GiB → %.2f GiB of tensors; manifest %s lists %s\n",
			what, gib(t.SourceBytes), gib(t.OutputBytes),
			convert.ManifestName, termtext.Plural(int64(len(res.Manifest.Files)), "file", "files"))
		if r := res.Report; r != nil {
			fmt.Fprintf(sw, "error on record in %s: %s\n", convert.ReportName, reportTotalLine(r.Total))
		}
	} else {
		fmt.Fprintf(sw, "slice done; the conversion completes when every worker has finished (or run: k3ckpt merge %s)\n", dst)
	}
	return nil
}

// castLine reports the cast's block counts in a sentence.
func castLine(what string, c quant.CastStats) string {
	pct := 100.0
	if c.Blocks > 0 {
		pct = 100 * float64(c.Blocks-c.OutOfRange) / float64(c.Blocks)
	}
	warn := ""
	if c.OutOfRange > 0 || c.Lossy > 0 {
		warn = "warning: "
	}
	return fmt.Sprintf("%s%s: %d blocks, %d lossless (%.6f%%), %d outside E4M3's exponent window, %d with values changed", warn, what, c.Blocks, c.Blocks-c.OutOfRange, pct, c.OutOfRange, c.Lossy)
}

// reportTotalLine sums up a quantization report's total in one line.
func reportTotalLine(e convert.ReportEntry) string {
	sqnr := "lossless"
	if e.SQNR != nil {
		sqnr = fmt.Sprintf("SQNR %.2f dB", *e.SQNR)
	} else if !e.Lossless {
		sqnr = "SQNR undefined"
	}
	return fmt.Sprintf("%s, %s blocks (%s lossy), max abs error %.3g, %s",
		termtext.Plural(e.Tensors, "tensor", "tensors"), termtext.Int(e.Blocks), termtext.Int(e.LossyBlocks), e.MaxAbsError, sqnr)
}

// nonNil makes a nil list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// printPlan shows what a conversion would do, file by file, and the totals.
// The text fits the terminal (termWidth): sizes in GiB, lists wrapped; -v
// adds the exact byte counts, which --json always has.
func printPlan(cmd *cobra.Command, w io.Writer, p *convert.Plan, asJSON bool) error {
	t := p.Totals
	if asJSON {
		type file struct {
			Name        string `json:"name"`
			Tensors     int    `json:"tensors"`
			Quantized   int    `json:"quantized"`
			SourceBytes int64  `json:"source_bytes"`
			OutputBytes int64  `json:"output_bytes"`
		}
		files := make([]file, 0, len(p.Files))
		for _, f := range p.Files {
			files = append(files, file{f.Name, len(f.Layout.Tensors), f.Totals.Quantized, f.Source.Size, f.Layout.Size})
		}
		aux := make([]string, 0, len(p.Aux))
		for _, a := range p.Aux {
			aux = append(aux, a.Name)
		}
		return writeJSON(w, map[string]any{
			"plan": p.ID, "recipe": p.Recipe.Name, "format": p.Options.Format, "scale_fmt": p.Options.ScaleFmt.String(),
			"experts": p.Options.Experts, "numerics": p.Options.Numerics.String(),
			"totals": t, "files": files, "aux": aux, "config": json.RawMessage(p.Config),
			"fused_splits": nonNil(p.Splits), "engines": engineReport(p),
		})
	}
	width := termWidth(cmd)
	line := func(indent, format string, a ...any) {
		fmt.Fprintln(w, termtext.Wrap(fmt.Sprintf(format, a...), width, indent))
	}
	line("  ", "plan %.12s: recipe %s, format %s, scales %s", p.ID, p.Recipe.Name, p.Options.Format, p.Options.ScaleFmt)
	if p.Recipe.Quantize != 0 {
		// The projection list is one comma-separated word: break it after commas.
		line("           ", "  %-8s %s", "quantize", strings.ReplaceAll(p.Recipe.Quantize.String(), ",", ", "))
	}
	line("           ", "  %-8s everything else; experts %s, numerics %s", p.Recipe.Default, p.Options.Experts, p.Options.Numerics)
	for _, s := range p.Splits {
		line("  ", "warning: recipe %s %s", p.Recipe.Name, s)
	}
	nameW := len("file")
	for _, f := range p.Files {
		nameW = max(nameW, len(f.Name))
	}
	for _, a := range p.Aux {
		nameW = max(nameW, len(a.Name))
	}
	sizeW, unit, size := 10, "GiB", func(b int64) string { return fmt.Sprintf("%.2f", gib(b)) }
	if verbose(cmd) {
		sizeW, unit, size = 14, "bytes", func(b int64) string { return fmt.Sprint(b) }
	}
	row := func(name, tensors, fp8, src, out string) {
		fmt.Fprintf(w, "%-*s %7s %5s %*s %*s\n", nameW, name, tensors, fp8, sizeW, src, sizeW, out)
	}
	row("file", "tensors", "fp8", "source "+unit, "output "+unit)
	for _, f := range p.Files {
		row(f.Name, fmt.Sprint(len(f.Layout.Tensors)), fmt.Sprint(f.Totals.Quantized), size(f.Source.Size), size(f.Layout.Size))
	}
	for _, a := range p.Aux {
		row(a.Name, "copy", "", size(a.Size), size(a.Size))
	}
	line("  ", "tensors: %d copied (%.2f GiB), %d quantized (%.2f GiB → %.2f GiB FP8 + %.2f MiB scales), %d dropped",
		t.Copied, gib(t.CopiedBytes), t.Quantized, gib(t.QuantizedBytes), gib(t.FP8Bytes), mib(t.ScaleBytes), t.Dropped)
	if t.NVFP4 > 0 {
		line("  ", "experts: %d MXFP4 projections cast to NVFP4 (%.2f GiB → %.2f GiB)", t.NVFP4, gib(t.MXFP4Bytes), gib(t.NVFP4Bytes))
	}
	if t.Decoded > 0 {
		line("  ", "decoded: %d quantized tensors to BF16 (%.2f GiB of BF16)", t.Decoded, gib(t.DecodedBytes))
	}
	if t.Packed > 0 {
		line("  ", "packed: %d BF16 experts to MXFP4 (%.2f GiB of BF16 read)", t.Packed, gib(t.PackedBytes))
	}
	line("  ", "total: %.2f GiB → %.2f GiB of tensors in %d shards; %d side files (%.2f MiB); %d output files",
		gib(t.SourceBytes), gib(t.OutputBytes), t.Files, t.AuxFiles, mib(t.AuxBytes), t.OutputFiles+1)
	return nil
}

// castScope says which files the cast's counts cover: the output less the
// files kept from a finished conversion, whose manifest keeps no counts.
func castScope(res *convert.Result) string {
	if res.Uncounted == 0 {
		return "MXFP4→NVFP4 cast of the output"
	}
	return fmt.Sprintf("MXFP4→NVFP4 cast of the output less the %s kept from a finished conversion (k3ckpt verify re-casts every file)",
		termtext.Plural(int64(res.Uncounted), "file", "files"))
}
