package inspect

import (
	"slices"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// TestConvertedConventions reads back a checkpoint (the tiny one cut to 4
// layers: 7 shards with every kind of tensor) as the converter lays it out in
// each engine convention, and checks it against figures that do not come
// from convert's planner (comparing with inspect's --recipe what-if would
// compare convert's plan with itself): the schedule's quantized weights (5 per
// KDA layer, 6 per MLA layer, 5 per MoE layer, 3 in a dense layer: layers 1–3
// KDA, layer 4 MLA, layer 1 dense and 2–4 MoE give 39; the 93 released
// layers give 952), each now F8_E4M3 codes at one byte an element plus one
// fp32 scale per 128 × 128 block, every scale counted in its weight's
// component, and nothing else changed.
func TestConvertedConventions(t *testing.T) {
	t.Parallel()
	const converted = 5*3 + 6*1 + 5*3 + 3
	src := smallReplica(t)
	source, err := Inspect(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// What each convention's config must say for engines to load it, as summary lines.
	wantQuant := map[model.Format][]string{
		model.DeepSeek:          {`quant_method: "fp8"`, `fmt: "e4m3"`, `weight_block_size: [128, 128]`},
		model.CompressedTensors: {`quant_method: "compressed-tensors"`, `format: "mixed-precision"`},
		model.ModelOpt:          {`quantization.quant_algo: "MIXED_PRECISION"`},
	}
	for _, format := range []model.Format{model.DeepSeek, model.CompressedTensors, model.ModelOpt} {
		t.Run(format.String(), func(t *testing.T) {
			dir := convertedReplica(t, "tiny-4-layers", src, format)
			rep, err := Inspect(dir, Options{Strict: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.TensorCount != source.TensorCount+converted {
				t.Errorf("%d tensors, want the source's %d + %d scales", rep.TensorCount, source.TensorCount, converted)
			}
			// From the converted headers themselves: the FP8 weights, the
			// blocks they hold, and the component of each.
			ck, err := safetensors.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			var fp8, fp8Bytes, blocks int64
			perComp := map[string]int64{}
			for _, f := range ck.Files {
				for _, ti := range f.Tensors {
					if ti.DType != safetensors.F8_E4M3 {
						continue
					}
					n, k := ti.Shape[0], ti.Shape[1]
					fp8++
					fp8Bytes += ti.Size()
					blocks += (n + 127) / 128 * ((k + 127) / 128)
					perComp[model.K3Classifier().Classify(ti.Name).String()]++
					if ti.Size() != n*k {
						t.Errorf("%s: %d B for [%d, %d] FP8 codes", ti.Name, ti.Size(), n, k)
					}
				}
			}
			if fp8 != converted {
				t.Errorf("%d F8_E4M3 weights, want %d", fp8, converted)
			}
			// BF16 weights became FP8 codes (half the bytes) plus 4-byte scales.
			bf16 := func(r *Report) int64 {
				for _, d := range r.DTypes {
					if d.DType == "BF16" {
						return d.Bytes
					}
				}
				return 0
			}
			if lost := bf16(source) - bf16(rep); lost != 2*fp8Bytes {
				t.Errorf("BF16 shrank by %d B, want twice the %d B of FP8 codes", lost, fp8Bytes)
			}
			if want := source.TotalBytes - fp8Bytes + 4*blocks; rep.TotalBytes != want {
				t.Errorf("%d B, want source %d − %d B halved away + 4 × %d blocks = %d", rep.TotalBytes, source.TotalBytes, fp8Bytes, blocks, want)
			}
			// Each scale is counted with its weight: a component gains one
			// tensor per FP8 weight it holds, and none other changes count.
			for _, c := range rep.Components {
				if got := c.Tensors - rowTensors(source.Components, c.Key); got != perComp[c.Key] {
					t.Errorf("%s gained %d tensors, holds %d FP8 weights", c.Key, got, perComp[c.Key])
				}
			}
			if rowBytes(rep.Components, "other") != 0 {
				t.Errorf("scale tensors left unclassified: %v", rep.Components)
			}
			if got, want := rowBytes(rep.Components, "routed_experts"), rowBytes(source.Components, "routed_experts"); got != want {
				t.Errorf("routed experts %d B, source %d B: the recipe keeps them", got, want)
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
			if format == model.ModelOpt && (len(rep.Quantization) != 2 || rep.Quantization[1].File != convert.HFQuantConfigName) {
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
// it out (deepseek convention): the audited 1403.79 GiB after the recipe from
// real converted headers, and the FP8 per-rank figures of dp16 directly.
func TestConvertedFull(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end on an on-disk replica: skipped under -short")
	}
	dir := convertedReplica(t, "full", fullReplica(t), model.DeepSeek)
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
	steps := map[string]step{}
	for _, s := range rep.Layout.Steps {
		steps[s.Label] = s
	}
	text, ws, vtp := steps["text only"], steps["weight shard"], steps["vocab TP8"]
	check(t, "non-expert per rank", gib1(nonExpertText(text.Components)), "55.8")
	check(t, "weight-shard set", gib1(ws.Sliced), "48.8")
	check(t, "weight-shard saving", gib1(text.Total-ws.Total), "42.7")
	check(t, "embed + lm_head per rank", gib2(rowBytes(vtp.Components, "embedding", "lm_head")), "0.55")
}

func rowTensors(rows []row, key string) int64 {
	for _, r := range rows {
		if r.Key == key {
			return r.Tensors
		}
	}
	return 0
}
