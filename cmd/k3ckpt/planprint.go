package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/layout"
)

// writeLayoutPlan prints an export plan under the name of the command that
// runs it: shard is an export of layout pp16, and its summary says "shard".
func writeLayoutPlan(cmd *cobra.Command, w io.Writer, plan *layout.Plan) error {
	var b bytes.Buffer
	if err := plan.WriteText(&b); err != nil {
		return err
	}
	text := b.String()
	if cmd.Name() == "shard" {
		if rest, ok := strings.CutPrefix(text, "export "); ok {
			text = "shard " + rest
		}
	}
	_, err := io.WriteString(w, text)
	return err
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
