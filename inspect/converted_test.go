package inspect

import (
	"slices"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
)

// TestConvertedConventions reads back the tiny checkpoint as the converter
// lays it out in each engine convention: the headers inspect reads are
// convert's, not inspect's own what-if, so agreeing with the what-if checks
// both paths; scales must land in their weight's component.
func TestConvertedConventions(t *testing.T) {
	src := tinyReplica(t)
	whatIf, err := Inspect(src, Options{Recipe: DefaultRecipe})
	if err != nil {
		t.Fatal(err)
	}
	// What each convention's config must say (SPEC §2), as summary lines.
	wantQuant := map[convert.Format][]string{
		convert.DeepSeek:          {`quant_method: "fp8"`, `fmt: "e4m3"`, `weight_block_size: [128, 128]`},
		convert.CompressedTensors: {`quant_method: "compressed-tensors"`, `format: "mixed-precision"`},
		convert.ModelOpt:          {`quantization.quant_algo: "MIXED_PRECISION"`},
	}
	for _, format := range []convert.Format{convert.DeepSeek, convert.CompressedTensors, convert.ModelOpt} {
		t.Run(format.String(), func(t *testing.T) {
			dir := convertedReplica(t, "tiny", src, format)
			rep, err := Inspect(dir, Options{Strict: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.TotalBytes != whatIf.Recipe.TotalBytes || rep.TensorCount != whatIf.Recipe.TensorCount {
				t.Errorf("converted %d B / %d tensors, what-if %d B / %d", rep.TotalBytes, rep.TensorCount, whatIf.Recipe.TotalBytes, whatIf.Recipe.TensorCount)
			}
			// Scale tensors are counted with their weight's component: the
			// converted checkpoint's components equal the what-if's, and
			// nothing falls under other.
			if !slices.Equal(rep.Components, whatIf.Recipe.Components) {
				t.Errorf("components\n got %v\nwant %v", rep.Components, whatIf.Recipe.Components)
			}
			if rowBytes(rep.Components, "other") != 0 {
				t.Errorf("scale tensors left unclassified: %v", rep.Components)
			}
			var lines []string
			for _, q := range rep.Quantization {
				lines = append(lines, q.Summary...)
			}
			for _, w := range wantQuant[format] {
				if !slices.Contains(lines, w) {
					t.Errorf("quantization summary lacks %q:\n%s", w, strings.Join(lines, "\n"))
				}
			}
			if format == convert.ModelOpt && (len(rep.Quantization) != 2 || rep.Quantization[1].File != convert.HFQuantConfigName) {
				t.Errorf("hf_quant_config.json not read back: %+v", rep.Quantization)
			}
			// The converted config parses (schedule, shape check): no warnings.
			if len(rep.Warnings) != 0 {
				t.Errorf("warnings: %v", rep.Warnings)
			}
			// On an FP8 source the memory steps start from the source and the
			// FP8 step changes nothing.
			lr, err := Inspect(dir, Options{Layout: "dp16", Steps: true})
			if err != nil {
				t.Fatal(err)
			}
			var labels []string
			for _, s := range lr.Layout.Steps {
				labels = append(labels, s.Label)
			}
			if want := []string{"source", "text only", "weight shard", "vocab TP8"}; !slices.Equal(labels, want) {
				t.Errorf("steps on an FP8 source: %v, want %v", labels, want)
			}
		})
	}
}

// TestConvertedFull reads back the full-size checkpoint as the converter lays
// it out (deepseek convention): SPEC's 1403.79 GiB from real converted
// headers, and the FP8 per-rank figures of dp16 directly.
func TestConvertedFull(t *testing.T) {
	testckpt.SkipShort(t)
	dir := convertedReplica(t, "full", fullReplica(t), convert.DeepSeek)
	rep, err := Inspect(dir, Options{Layout: "dp16", Steps: true, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("warnings: %v", rep.Warnings)
	}
	check(t, "converted GiB", gib2(rep.TotalBytes), "1403.79")
	check(t, "non-expert GiB", gib1(nonExpertText(rep.Components)), "55.8")
	if rowBytes(rep.Components, "other") != 0 {
		t.Errorf("scale tensors left unclassified: %v", rep.Components)
	}
	steps := map[string]Step{}
	for _, s := range rep.Layout.Steps {
		steps[s.Label] = s
	}
	text, ws, vtp := steps["text only"], steps["weight shard"], steps["vocab TP8"]
	check(t, "non-expert per rank", gib1(nonExpertText(text.Components)), "55.8")
	check(t, "weight-shard set", gib1(ws.Sliced), "48.8")
	check(t, "weight-shard saving", gib1(text.Total-ws.Total), "42.7")
	check(t, "embed + lm_head per rank", gib2(rowBytes(vtp.Components, "embedding", "lm_head")), "0.55")
}
