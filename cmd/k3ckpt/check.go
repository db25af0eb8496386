package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/engines"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
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
