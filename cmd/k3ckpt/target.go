package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/engines"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

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
