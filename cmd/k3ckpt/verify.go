package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

func newVerifyCmd() *cobra.Command {
	var asJSON bool
	var jobs int
	var nonFinite string
	cmd := &cobra.Command{
		Use:   "verify SRC DST",
		Short: "Check a conversion against its source: a fresh quantization bit for bit (FP8, NVFP4), hashes, exactly the manifest's files",
		Long: `verify re-reads DST against SRC: DST holds exactly the manifest's files
(no stray files, no links), each with its recorded size and sha256; the
structure matches a fresh plan (every tensor present with the dtype and shape
of the recipe and convention, index and config consistent); every copied
tensor (the MXFP4 experts among them) equals the source byte for byte; every
FP8 tensor and its scales equal a fresh quantization of the source bit for
bit, with the dequantization error reported (max abs error, max relative
error per 128×128 block, SNR); quantization_report.json equals the report
recomputed from SRC and DST byte for byte. Exit 1 on any violation.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var vo convert.VerifyOptions
			if err := vo.NonFinite.UnmarshalText([]byte(nonFinite)); err != nil {
				return flagError("nonfinite", err)
			}
			jobs, err := resolveJobs(jobs, convert.MaxJobs)
			if err != nil {
				return err
			}
			if !remote.IsRemote(args[0]) && !remote.IsRemote(args[1]) {
				if err := fsx.Disjoint(args[1], args[0]); err != nil {
					return err
				}
			}
			planMemory(args[0])
			src, err := safetensors.Open(args[0])
			if err != nil {
				return err
			}
			defer src.Close()
			b := newProgress(cmd, asJSON, "verify (read)", unitBytes)
			vo.Jobs = jobs
			vo.Progress = b // a nil bar shows nothing
			rep, err := convert.Verify(cmd.Context(), src, args[1], vo)
			b.finish()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				// Marshaled first: the report's strings keep encoding/json's
				// HTML escaping, which writeJSON leaves off.
				b, err := json.Marshal(rep)
				if err != nil {
					return err
				}
				if err := writeJSON(out, json.RawMessage(b)); err != nil {
					return err
				}
			} else {
				printVerify(wrapLines(cmd), rep, quiet(cmd))
			}
			if !rep.OK {
				return fmt.Errorf("verification failed: %d violations", len(rep.Violations))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the full report as one JSON object")
	addJobsFlag(cmd.Flags(), &jobs)
	cmd.Flags().StringVar(&nonFinite, "nonfinite", "error", "for a DST whose manifest does not record its policy (made before it did): error (a NaN/Inf in a weight to quantize is a violation) or zero; a manifest that records zero is checked under it")
	return cmd
}

// printVerify prints the verdict; quiet, only the violations (the exit
// status says the rest).
func printVerify(w io.Writer, r *convert.VerifyReport, quiet bool) {
	sw := w // the summary lines
	if quiet {
		sw = io.Discard
	}
	fmt.Fprintf(sw, "verify plan %.12s (recipe %s, format %s, scales %s): %d files hashed (%.2f GiB), %d tensors identical, %d FP8 tensors\n",
		r.Plan, r.Recipe, r.Format, r.ScaleFmt, r.Files, gib(r.Hashed), r.Copied, r.Quantized)
	if r.Decoded > 0 || r.Packed > 0 {
		fmt.Fprintf(sw, "%d tensors decoded to BF16 and %d packed to MXFP4 equal a fresh decode / packing of the source bit for bit\n", r.Decoded, r.Packed)
	}
	var worstRel float64
	var worstName string
	minSNR := -1.0
	for _, t := range r.Tensors {
		if t.MaxRelBlock > worstRel {
			worstRel, worstName = t.MaxRelBlock, t.Name
		}
		if t.SNRdB != nil && (minSNR < 0 || *t.SNRdB < minSNR) {
			minSNR = *t.SNRdB
		}
	}
	if r.ZeroScaleBlocks > 0 {
		fmt.Fprintf(sw, "FP8: %d blocks with scale 0 and NaN codes (all-zero tiles under ModelOpt numerics)\n", r.ZeroScaleBlocks)
	}
	if r.NVFP4 > 0 {
		fmt.Fprintln(sw, castLine(fmt.Sprintf("NVFP4: %d projections re-cast and compared bit for bit", r.NVFP4), r.Cast))
	}
	if len(r.Tensors) > 0 {
		fmt.Fprintf(sw, "FP8: worst block relative error %.4f (%s), lowest SNR %.2f dB\n", worstRel, worstName, minSNR)
	}
	if r.Report != nil {
		fmt.Fprintf(sw, "%s recomputed from SRC and DST: %s\n", convert.ReportName, reportTotalLine(r.Report.Total))
	}
	for _, v := range r.Violations {
		fmt.Fprintln(w, "violation:", v)
	}
	if r.OK {
		fmt.Fprintln(sw, "OK")
	}
}
