package convert

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
)

// action is what a recipe does with one source tensor.
type action = enum[actionSet]

type actionSet struct{}

func (actionSet) set() ([]string, string, string) { return actionNames[:], "Action", "action" }

const (
	keep     action = iota // copy byte for byte
	quantize               // a 2-D float weight to block FP8
	// decode turns a quantized weight back into BF16 under its unquantized
	// name, dropping its companions, and keeps anything else; routed experts
	// follow --experts.
	decode
)

var actionNames = [...]string{keep: "keep", quantize: "quantize", decode: "bf16"}

// Recipe is a conversion written as data: the schema groups whose X.weight
// tensors become block FP8, and the action for every other tensor.
type Recipe struct {
	Name     string
	Doc      string
	Quantize model.GroupSet
	Default  action
}

// classify returns the action for a tensor name, its group read by cls.
func (r *Recipe) classify(cls *model.Classifier, name string) action {
	if r.Quantize != 0 {
		if tn := cls.ParseName(name); tn.Role == model.RoleWeight && r.Quantize.Has(tn.Group) {
			return quantize
		}
	}
	return r.Default
}

// Names of the built-in recipes.
const (
	// AttnMoEDenseFP8 (the default) puts attention, shared experts, latent
	// projections and the dense MLP in block FP8.
	AttnMoEDenseFP8 = "attn-moe-dense-fp8"
	// ModelOptK3 is NVIDIA's choice for nvidia/Kimi-K3-NVFP4 (--attn_fp8_pb):
	// every attention projection in block FP8, MLPs BF16.
	ModelOptK3 = "modelopt-k3"
	// BF16 decodes every quantized non-expert weight back to BF16.
	BF16 = "bf16"
)

// recipes are the recipes the toolkit ships. modelopt-k3 is
// _ATTN_FP8_PB_PROJ of Model-Optimizer's
// examples/kimi/kimi_k3/quantize_to_nvfp4.py: KDA b and f_a fuse into
// vLLM's in_proj_qkvgfab, f_b's 128-wide input is tile aligned.
var recipes = map[string]*Recipe{
	AttnMoEDenseFP8: {
		Name: AttnMoEDenseFP8,
		Doc:  "block-FP8 (128×128) attention projections, shared experts, latent MoE projections and the dense layer-0 MLP; MXFP4 experts and everything else unchanged",
		Quantize: mustGroups("kda.q_proj,kda.k_proj,kda.v_proj,kda.g_proj,kda.o_proj," +
			"mla.q_a_proj,mla.q_b_proj,mla.kv_a_proj_with_mqa,mla.kv_b_proj,mla.o_proj,mla.g_proj," +
			"shared_experts,latent.down_proj,latent.up_proj,dense_mlp"),
	},
	ModelOptK3: {
		Name: ModelOptK3,
		Doc:  "NVIDIA's Kimi-K3 choice: block-FP8 KDA q/k/v/g/o/b/f_a/f_b and every MLA projection; shared experts, latent projections, dense MLP and everything else BF16",
		Quantize: mustGroups("kda.q_proj,kda.k_proj,kda.v_proj,kda.g_proj,kda.o_proj,kda.b_proj,kda.f_a_proj,kda.f_b_proj," +
			"mla.q_a_proj,mla.q_b_proj,mla.kv_a_proj_with_mqa,mla.kv_b_proj,mla.o_proj,mla.g_proj"),
	},
	BF16: {
		Name:    BF16,
		Doc:     "every block-FP8 (any convention, fp32 or UE8M0 scales) or NVFP4 weight decoded back to BF16 under its unquantized name, its scales dropped; routed experts as --experts says (bf16 for the whole BF16 checkpoint)",
		Default: decode,
	},
}

// mustGroups parses a built-in recipe's group list.
func mustGroups(list string) model.GroupSet {
	gs, err := model.ParseGroupSet(list)
	if err != nil {
		panic("convert: built-in recipe invalid: " + err.Error())
	}
	return gs
}

// Lookup returns a built-in recipe by name.
func Lookup(name string) (*Recipe, error) {
	if r, ok := recipes[name]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("%w %q (known: %s)", errUnknownRecipe, name, strings.Join(RecipeNames(), ", "))
}

// RecipeNames lists the built-in recipes, sorted.
func RecipeNames() []string {
	return slices.Sorted(maps.Keys(recipes))
}
