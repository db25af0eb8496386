package convert

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
)

// action is what a recipe does with one source tensor.
type action = enum[actionSet]

type actionSet struct{}

func (actionSet) set() ([]string, string, string) { return actionNames[:], "Action", "action" }

const (
	// keep copies the tensor byte for byte.
	keep action = iota
	// quantize turns a 2-D float weight into block-FP8 (E4M3, one fp32 scale per 128×128 block).
	quantize
	// drop leaves the tensor out of the output.
	drop
	// decode turns a quantized weight (block FP8, MXFP4, NVFP4) back into
	// BF16 under its unquantized name, dropping its companions; anything
	// else is kept. Routed experts follow --experts instead.
	decode
)

var actionNames = [...]string{keep: "keep", quantize: "quantize", drop: "drop", decode: "bf16"}

// rule maps the tensor names matching Pattern to Action. Patterns are Go
// regular expressions over the full tensor name.
type rule struct {
	Pattern string
	Action  action
	// Why is a short reason shown by --dry-run and in docs.
	Why string

	re *regexp.Regexp
}

// Recipe is a conversion written as data: the schema groups (package
// model's tensor groups) whose weights it block-quantizes, an ordered rule
// table for anything else (the first matching rule wins, before the groups),
// and the action for names neither names.
type Recipe struct {
	Name string
	Doc  string
	// Quantize are the groups whose X.weight tensors become block FP8.
	Quantize model.GroupSet
	Rules    []rule
	Default  action
}

// newGroupRecipe compiles a recipe's patterns, so that a bad pattern fails
// once, here, rather than on some tensor later; quantize are the schema
// groups whose weights it quantizes.
func newGroupRecipe(name, doc string, quantize model.GroupSet, def action, rules []rule) (*Recipe, error) {
	r := &Recipe{Name: name, Doc: doc, Quantize: quantize, Default: def, Rules: slices.Clone(rules)}
	for i := range r.Rules {
		re, err := regexp.Compile(r.Rules[i].Pattern)
		if err != nil {
			return nil, fmt.Errorf("recipe %s: rule %d: %w", name, i, err)
		}
		if int(r.Rules[i].Action) >= len(actionNames) {
			return nil, fmt.Errorf("recipe %s: rule %d: invalid action %d", name, i, r.Rules[i].Action)
		}
		r.Rules[i].re = re
	}
	return r, nil
}

// groupRule is the index classify returns for a tensor decided by Quantize.
const groupRule = -2

// classify returns the action for a tensor name and the index of the rule
// that decided it (groupRule for the groups, -1 for the default), reading
// the name's group as cls does.
func (r *Recipe) classify(cls *model.Classifier, name string) (action, int) {
	for i := range r.Rules {
		if r.Rules[i].re.MatchString(name) {
			return r.Rules[i].Action, i
		}
	}
	if r.Quantize != 0 {
		if tn := cls.ParseName(name); tn.Role == model.RoleWeight && r.Quantize.Has(tn.Group) {
			return quantize, groupRule
		}
	}
	return r.Default, -1
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

// builtinRecipes is the table of recipes the toolkit ships; everything no
// rule names falls to the default, Keep (the routed experts too: --experts
// decides them).
//
// attn-moe-dense-fp8 quantizes the KDA q/k/v/g/o and all MLA projections,
// the shared experts, the latent projections and the layer-0 MLP; it keeps
// KDA f_a/f_b/b_proj, conv1d, A_log, dt_bias, norms, AttnRes, router,
// routed_expert_norm, embedding, lm_head and vision.
//
// modelopt-k3 is the set NVIDIA's exporter quantizes with --attn_fp8_pb
// (_ATTN_FP8_PB_PROJ in Model-Optimizer examples/kimi/kimi_k3/
// quantize_to_nvfp4.py: q/k/v, q_a/q_b/kv_a_proj_with_mqa/kv_b, o/g, b/f_a
// and f_b): the KDA b and f_a projections with the rest of vLLM's fused
// in_proj_qkvgfab, f_b because its 128-wide input is tile aligned; shared
// experts, latent projections and the dense MLP stay BF16.
var builtinRecipes = []struct {
	name, doc string
	quantize  string // model.ParseGroupSet list
	def       action
}{
	{
		name: AttnMoEDenseFP8,
		doc:  "block-FP8 (128×128) attention projections, shared experts, latent MoE projections and the dense layer-0 MLP; MXFP4 experts and everything else unchanged",
		quantize: "kda.q_proj,kda.k_proj,kda.v_proj,kda.g_proj,kda.o_proj," +
			"mla.q_a_proj,mla.q_b_proj,mla.kv_a_proj_with_mqa,mla.kv_b_proj,mla.o_proj,mla.g_proj," +
			"shared_experts,latent.down_proj,latent.up_proj,dense_mlp",
		def: keep,
	},
	{
		name: ModelOptK3,
		doc:  "NVIDIA's Kimi-K3 choice: block-FP8 KDA q/k/v/g/o/b/f_a/f_b and every MLA projection; shared experts, latent projections, dense MLP and everything else BF16",
		quantize: "kda.q_proj,kda.k_proj,kda.v_proj,kda.g_proj,kda.o_proj,kda.b_proj,kda.f_a_proj,kda.f_b_proj," +
			"mla.q_a_proj,mla.q_b_proj,mla.kv_a_proj_with_mqa,mla.kv_b_proj,mla.o_proj,mla.g_proj",
		def: keep,
	},
	{
		name: BF16,
		doc:  "every block-FP8 (any convention, fp32 or UE8M0 scales) or NVFP4 weight decoded back to BF16 under its unquantized name, its scales dropped; routed experts as --experts says (bf16 for the whole BF16 checkpoint)",
		def:  decode,
	},
}

var recipes = func() map[string]*Recipe {
	m := make(map[string]*Recipe, len(builtinRecipes))
	for _, b := range builtinRecipes {
		gs, err := model.ParseGroupSet(b.quantize)
		var r *Recipe
		if err == nil {
			r, err = newGroupRecipe(b.name, b.doc, gs, b.def, nil)
		}
		if err != nil {
			panic("convert: built-in recipe invalid: " + err.Error()) // a programming error, caught by every test
		}
		m[b.name] = r
	}
	return m
}()

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
