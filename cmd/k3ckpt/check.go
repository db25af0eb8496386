package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/engines"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
	"github.com/spf13/cobra"
)

func newCheckCmd() *cobra.Command {
	var engine, gpu string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check PATH|URL",
		Short: "Say what each engine on each GPU makes of a checkpoint (resident, dequantized at load, loads wrong, refused), from headers only",
		Long: `check reads config.json, hf_quant_config.json, the index and the shard headers
(no tensor data) and says, for each engine (` + strings.Join(engines.EngineNames(), ", ") + `)
and GPU (sm90 Hopper, sm100 Blackwell), what each tensor group becomes and
which rule of the engine's loader says so (repository, commit, function; the
table is docs/COMPATIBILITY.md). Exit status: 0 when the engines asked for
load it; 1 when --engine would refuse it or load it wrong, or the checkpoint
is inconsistent (an FP8 weight without its scale); 2 when --engine's path for
some part was not read (unknown).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runCheck(cmd, args[0], engine, gpu, asJSON) },
	}
	f := cmd.Flags()
	f.StringVar(&engine, "engine", "", "only this engine ("+strings.Join(engines.EngineNames(), ", ")+"); its verdict sets the exit status")
	f.StringVar(&gpu, "gpu", "", "only this GPU: sm90 (Hopper) or sm100 (Blackwell)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func runCheck(cmd *cobra.Command, path, engine, gpuName string, asJSON bool) error {
	var gpu engines.GPU
	var err error
	if gpuName != "" {
		if gpu, err = engines.ParseGPU(gpuName); err != nil {
			return flagError("gpu", err)
		}
	}
	if engine != "" {
		if _, err := engines.EvaluateAll(&engines.Facts{}, engine, gpu); err != nil {
			return flagError("engine", err)
		}
	}
	facts, err := engines.Scan(context.Background(), path)
	if err != nil {
		return err
	}
	vs, err := engines.EvaluateAll(facts, engine, gpu)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		if err := writeJSON(out, map[string]any{"source": path, "facts": facts, "verdicts": vs}); err != nil {
			return err
		}
	} else {
		printCheck(out, path, facts, vs)
	}
	return checkStatus(facts, vs, engine != "")
}

// checkStatus turns the verdicts into the exit status: only an engine the
// user named decides it; an inconsistent checkpoint always fails.
func checkStatus(f *engines.Facts, vs []engines.Verdict, asked bool) error {
	if len(f.Problems) > 0 {
		return fmt.Errorf("the checkpoint is inconsistent: %s", f.Problems[0])
	}
	if !asked {
		return nil
	}
	var unknown error
	for _, v := range vs {
		why := fmt.Sprintf("%s on %s: %s", v.Engine, v.GPU, v.Summary())
		if v.Outcome.Fails() {
			return errors.New(why)
		}
		if v.Outcome == engines.Unknown && unknown == nil {
			unknown = &cliError{msg: why, code: 2}
		}
	}
	return unknown
}

func printCheck(w io.Writer, path string, f *engines.Facts, vs []engines.Verdict) {
	method := ""
	if f.Method != "" {
		method = " (quant_method " + termtext.Name(f.Method) + ")"
	}
	fmt.Fprintf(w, "%s: convention %s%s\n", path, f.Convention, method)
	for _, p := range f.Parts {
		if p.Form == engines.BF16 {
			continue
		}
		extra := ""
		if p.Scale != "" {
			extra += ", " + string(p.Scale)
		}
		if p.Declared != "" {
			extra += ", declared " + termtext.Name(p.Declared)
		}
		fmt.Fprintf(w, "  %-26s %s%s: %d modules\n", p.Group, p.Form, extra, p.Modules)
	}
	for _, p := range f.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
	for _, v := range vs {
		fmt.Fprintf(w, "%s on %s: %s\n", v.Engine, v.GPU, v.Summary())
		for _, it := range v.Items {
			if it.Rule == "" && it.Outcome == engines.Resident {
				continue // BF16 that stays BF16
			}
			form := ""
			if it.Form != "" {
				form = " (" + string(it.Form) + ")"
			}
			fmt.Fprintf(w, "  %-11s %s%s: %s", it.Outcome, strings.Join(it.Groups, ","), form, it.Why)
			if it.Message != "" {
				fmt.Fprintf(w, "; engine says %q", it.Message)
			}
			if it.Source != "" {
				fmt.Fprintf(w, " [%s; %s]", it.Source, it.Evidence)
			}
			fmt.Fprintln(w)
		}
		for _, o := range v.OptIn {
			fmt.Fprintln(w, "  opt-in:", o)
		}
	}
}

// sourceFacts reads an opened source's facts from its configs and headers.
func sourceFacts(src *safetensors.Checkpoint) (*engines.Facts, error) {
	config, err := src.ReadAux(model.ConfigName)
	if err != nil {
		return nil, err
	}
	hfq, err := src.ReadAux(convert.HFQuantConfigName)
	if err != nil && !errors.Is(err, safetensors.ErrNotFound) {
		return nil, err
	}
	files := make([][]safetensors.TensorInfo, len(src.Files))
	for i, f := range src.Files {
		files[i] = f.Tensors
	}
	return engines.FactsOf(config, hfq, files)
}

// applyTarget sets the options --target chooses. Flags given explicitly
// narrow the choice; when they leave nothing the engine loads, that is an
// error unless --force (then they are kept as given).
func applyTarget(cmd *cobra.Command, src *safetensors.Checkpoint, tf *convertFlags, r *convert.Recipe, opts convert.Options) (*convert.Recipe, convert.Options, error) {
	if tf.target == "" {
		return r, opts, nil
	}
	engine, gpu, err := engines.ParseTarget(tf.target)
	if err != nil {
		return nil, opts, flagError("target", err)
	}
	facts, err := sourceFacts(src)
	if err != nil {
		return nil, opts, err
	}
	fs := cmd.Flags()
	set := func(name, v, want string) bool { return !fs.Changed(name) || v == want }
	allowed := func(p engines.Profile) bool {
		return set("format", opts.Format.String(), p.Format) && set("recipe", r.Name, p.Recipe) && set("experts", opts.Experts.String(), p.Experts)
	}
	narrowed := fs.Changed("format") || fs.Changed("recipe") || fs.Changed("experts")
	if !narrowed {
		allowed = nil
	}
	c, err := engines.Choose(facts, engine, gpu, allowed)
	switch {
	case errors.Is(err, engines.ErrNoTarget) && tf.force:
		warn(cmd, "--force: %v; writing the flags as given", err)
		return r, opts, nil
	case errors.Is(err, engines.ErrNoTarget) && narrowed:
		return nil, opts, fmt.Errorf("--target %s contradicts the flags given: %w (drop them to let --target choose, or --force)", tf.target, err)
	case err != nil:
		return nil, opts, fmt.Errorf("--target %s: %w", tf.target, err)
	}
	if r, err = convert.Lookup(c.Profile.Recipe); err != nil {
		return nil, opts, err
	}
	if opts.Format, err = convert.ParseFormat(c.Profile.Format); err != nil {
		return nil, opts, err
	}
	if err = opts.Experts.UnmarshalText([]byte(c.Profile.Experts)); err != nil {
		return nil, opts, err
	}
	numWhy := "no engine rule depends on the block-FP8 cast; DeepGEMM's is the default"
	if !fs.Changed("numerics") && c.Profile.Recipe == convert.ModelOptK3 && c.Profile.Experts == convert.ExpertsNVFP4.String() {
		opts.Numerics, numWhy = quant.ModelOpt, "NVIDIA's layout: ModelOpt's cast writes nvidia/Kimi-K3-NVFP4's bytes, the files these loaders were validated on"
	} else if fs.Changed("numerics") {
		numWhy = "as given"
	}
	on := "sm90 and sm100"
	if gpu != "" {
		on = string(gpu)
	}
	w := cmd.ErrOrStderr()
	if !quiet(cmd) {
		fmt.Fprintf(w, "target %s: %s --numerics %s (%s on %s)\n", tf.target, c.Profile.Flags(), opts.Numerics, c.Verdict.Summary(), on)
		for _, why := range c.Why {
			fmt.Fprintln(w, "  because", why)
		}
		fmt.Fprintln(w, "  numerics:", numWhy)
	}
	return r, opts, nil
}

// engineLine is one engine's verdict on a planned output.
type engineLine struct {
	Engine  string          `json:"engine"`
	GPU     engines.GPU     `json:"gpu"`
	Outcome engines.Outcome `json:"outcome"`
	Why     string          `json:"why"`
}

// engineReport is what every engine on every GPU makes of a plan's output.
func engineReport(p *convert.Plan) []engineLine {
	files := make([][]safetensors.TensorInfo, len(p.Files))
	for i, f := range p.Files {
		files[i] = f.Layout.Tensors
	}
	out := []engineLine{}
	facts, err := engines.FactsOf(p.Config, p.HFQuantConfig, files)
	if err != nil {
		return out
	}
	vs, _ := engines.EvaluateAll(facts, "", "")
	for _, v := range vs {
		out = append(out, engineLine{v.Engine, v.GPU, v.Outcome, v.Summary()})
	}
	return out
}

// checkPlanEngines prints one warning line per engine whose load of the
// planned output fails or is wrong, and refuses (unless --force) an output
// the --target engine would fail on.
func checkPlanEngines(cmd *cobra.Command, p *convert.Plan, tf *convertFlags) error {
	lines := engineReport(p)
	engine, gpu, _ := engines.ParseTarget(tf.target)
	var failed []string
	for _, name := range engines.EngineNames() {
		var gpus, whys []string
		for _, l := range lines {
			if l.Engine == name && l.Outcome.Fails() {
				gpus = append(gpus, string(l.GPU))
				whys = append(whys, string(l.GPU)+": "+l.Why)
				if tf.target != "" && name == engine && (gpu == "" || gpu == l.GPU) {
					failed = append(failed, fmt.Sprintf("%s on %s: %s", name, l.GPU, l.Why))
				}
			}
		}
		if len(gpus) > 0 && !tf.json {
			why := strings.Join(whys, "; ")
			if len(whys) == 2 && whys[0][len(gpus[0]):] == whys[1][len(gpus[1]):] {
				why = whys[0][len(gpus[0])+2:]
			}
			warn(cmd, "%s (%s) %s", name, strings.Join(gpus, ", "), why)
		}
	}
	if len(failed) > 0 && !tf.force {
		return fmt.Errorf("--target %s: the planned output fails there: %s (--force writes it anyway)", tf.target, failed[0])
	}
	return nil
}
