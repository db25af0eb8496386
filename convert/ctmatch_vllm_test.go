package convert

import (
	"fmt"
	"testing"
)

// vLLM decides a FusedMoE layer's compressed-tensors scheme from three probe
// names, layer + ".0.gate_proj", ".0.up_proj" and ".0.down_proj"
// (vllm-project/vllm, compressed_tensors_moe.py,
// CompressedTensorsMoEMethod.get_moe_method), each matched against the
// group's targets and the ignore list with Python's re.match from the start
// of the name (utils.py @008014e8, _is_equal_or_regex_match), which is what
// ctMatcher does. The experts must match the FP8 experts' target and no
// ignore entry of the MXFP4 config --experts mxfp4 writes, under every text
// prefix and both MoE spellings, while the dense and shared MLPs, attention
// and the head stay ignored.
func TestExpertPatternsAgainstVLLMProbes(t *testing.T) {
	t.Parallel()
	fp8, err := ctMatcher(expertsTarget)
	if err != nil {
		t.Fatal(err)
	}
	var ignore []func(string) bool
	for _, e := range releaseMXFP4Config()["ignore"].([]any) {
		m, err := ctMatcher(e.(string))
		if err != nil {
			t.Fatal(err)
		}
		ignore = append(ignore, m)
	}
	ignored := func(name string) bool {
		for _, m := range ignore {
			if m(name) {
				return true
			}
		}
		return false
	}
	for _, prefix := range []string{"model.", "language_model.model."} {
		for _, moe := range []string{"mlp", "block_sparse_moe"} {
			layer := fmt.Sprintf("%slayers.7.%s.experts", prefix, moe)
			for _, probe := range []string{".0.gate_proj", ".0.up_proj", ".0.down_proj"} {
				name := layer + probe
				if !fp8(name) {
					t.Errorf("%s: the FP8 experts' target %s does not match vLLM's probe", name, expertsTarget)
				}
				if ignored(name) {
					t.Errorf("%s: an ignore entry of the MXFP4 config matches vLLM's probe: the experts would load unquantized", name)
				}
			}
			if !fp8(layer) {
				t.Errorf("%s: the FP8 experts' target does not match the fused layer", layer)
			}
		}
		for _, kept := range []string{"layers.0.mlp.gate_proj", "layers.0.mlp.down_proj", "layers.7.mlp.shared_experts.up_proj",
			"layers.3.self_attn.q_a_proj", "layers.7.mlp.gate_up_proj"} {
			name := prefix + kept
			if !ignored(name) {
				t.Errorf("%s: no ignore entry of the MXFP4 config matches it", name)
			}
			if fp8(name) {
				t.Errorf("%s: the FP8 experts' target matches a module that is not a routed expert", name)
			}
		}
	}
}
