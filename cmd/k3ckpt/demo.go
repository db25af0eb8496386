package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// demoStep is one CLI invocation of the walkthrough; args are relative to the
// demo directory.
type demoStep struct {
	what string
	args []string
}

// demoSteps is the walkthrough, the commands a user would type. Outputs not
// kept are removed at the end, so then no step writes the chart.
func demoSteps(dir string, keep bool) []demoStep {
	src := filepath.Join(dir, "k3-tiny")
	fp8 := filepath.Join(dir, "k3-tiny-fp8")
	bf16, mx := filepath.Join(dir, "k3-tiny-bf16"), filepath.Join(dir, "k3-tiny-mxfp4")
	audit := demoStep{"audit the converted checkpoint per rank under the DP16 decode layout", []string{"inspect", fp8, "--layout", "dp16"}}
	if keep {
		audit.what += ", and chart its memory step by step"
		audit.args = append(audit.args, "--chart", filepath.Join(dir, "dp16-memory.svg"))
	}
	return []demoStep{
		{"build a tiny Kimi-K3 replica (93 layers, every tensor kind, 96 shards)", []string{"synth", src, "--scale", "tiny", "--seed", "1"}},
		{"audit it from headers only", []string{"inspect", src}},
		{"what would ATTN-MOE-DENSE-FP8 do? (no bytes converted)", []string{"inspect", src, "--recipe", "attn-moe-dense-fp8"}},
		{"convert it to ATTN-MOE-DENSE-FP8 (block-FP8 128×128, experts untouched)", []string{"convert", src, fp8, "--jobs", "2"}},
		{"verify the conversion against the source", []string{"verify", src, fp8}},
		audit,
		{"pre-shard it into the 16 prefill pipeline stages", []string{"shard", fp8, filepath.Join(dir, "pp16")}},
		{"export ranks 0 and 9 of the DP16 decode layout", []string{"export", fp8, filepath.Join(dir, "dp16"), "--layout", "dp16", "--ranks", "0,9"}},
		{"export all ranks of the DP2×DCP8 decode layout", []string{"export", fp8, filepath.Join(dir, "dcp8"), "--layout", "dp2-dcp8"}},
		{"rebuild the checkpoint from the DP2×DCP8 export and prove it lossless", []string{"reassemble", filepath.Join(dir, "dcp8"), filepath.Join(dir, "dcp8-rebuilt"), "--check", fp8}},
		{"decode the release to BF16 masters (MXFP4 experts → BF16, exactly as torch computes it)", []string{"convert", src, bf16, "--recipe", "bf16", "--experts", "bf16", "--jobs", "2"}},
		{"pack the BF16 experts back into the release's MXFP4 (compressed-tensors' rule; every value comes back)", []string{"convert", bf16, mx, "--recipe", "bf16", "--experts", "mxfp4", "--jobs", "2"}},
		{"verify the packed experts byte for byte against a fresh packing of the BF16 masters", []string{"verify", bf16, mx}},
		{"cast the MXFP4 experts to block FP8 for Hopper (power-of-two scales: the summary counts the lossless blocks)", []string{"convert", src, filepath.Join(dir, "k3-tiny-fp8-experts"), "--experts", "fp8", "--format", "deepseek", "--scale-fmt", "ue8m0", "--jobs", "2"}},
	}
}

// newDemoCmd is the demo command with each step run by runStep: runSelf,
// or a test's stand-in.
func newDemoCmd(runStep func(self string, args []string, stdout, stderr io.Writer) error) *cobra.Command {
	var dir string
	var keep, asJSON bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Build a tiny K3 replica, convert, verify, inspect, shard and export it",
		Long: "demo runs the whole toolkit on an embedded default: a tiny Kimi-K3 replica built\n" +
			"from the embedded config. Each step is a real k3ckpt invocation, printed before it runs.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "k3ckpt-demo-"); err != nil {
					return err
				}
				if !keep {
					defer os.RemoveAll(dir)
				}
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			kept := keep || cmd.Flags().Changed("dir")
			steps := demoSteps(dir, kept)
			// Under -q or --json the steps run quietly and their output is
			// dropped: errors still reach stderr.
			out := cmd.OutOrStdout()
			if quiet(cmd) || asJSON {
				out = io.Discard
			}
			if onPath, err := exec.LookPath("k3ckpt"); err != nil || !sameFile(onPath, self) {
				fmt.Fprintf(out, "(k3ckpt below is %s; to type the commands yourself, put it on PATH: go install ./cmd/k3ckpt)\n", self)
			}
			type stepReport struct {
				Step    string   `json:"step"`
				Args    []string `json:"args"`
				Seconds float64  `json:"seconds"`
			}
			var done []stepReport
			start := time.Now()
			for i, s := range steps {
				fmt.Fprintf(out, "\n── step %d/%d: %s\n$ k3ckpt %s\n", i+1, len(steps), s.what, strings.Join(s.args, " "))
				args := s.args
				if out == io.Discard {
					args = append(slices.Clone(args), "-q")
				}
				t0 := time.Now()
				if err := runStep(self, args, out, cmd.ErrOrStderr()); err != nil {
					return fmt.Errorf("demo step %d (k3ckpt %s): %w", i+1, s.args[0], err)
				}
				done = append(done, stepReport{s.what, s.args, time.Since(t0).Seconds()})
			}
			if asJSON {
				v := map[string]any{"steps": done, "seconds": time.Since(start).Seconds(), "kept": kept}
				if kept {
					v["dir"] = dir
				}
				return writeJSON(cmd.OutOrStdout(), v)
			}
			if kept {
				fmt.Fprintf(out, "\ndemo finished in %.1fs; outputs in %s (chart: %s)\n", time.Since(start).Seconds(), dir, filepath.Join(dir, "dp16-memory.svg"))
			} else {
				fmt.Fprintf(out, "\ndemo finished in %.1fs; its temporary outputs are removed (--dir DIR keeps them and adds the memory chart)\n", time.Since(start).Seconds())
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "write the demo's checkpoints here (kept)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temporary demo directory")
	cmd.Flags().BoolVar(&asJSON, "json", false, "run the steps quietly and print one JSON object: each step's command and seconds")
	return cmd
}

func runSelf(self string, args []string, stdout, stderr io.Writer) error {
	c := exec.Command(self, args...)
	c.Stdout, c.Stderr = stdout, stderr
	return c.Run()
}

// sameFile reports whether two paths name one file.
func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}
