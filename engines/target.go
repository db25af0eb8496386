package engines

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Profile is one combination of convert's choices, named as its flags are.
type Profile struct {
	Format  string `json:"format"`
	Recipe  string `json:"recipe"`
	Experts string `json:"experts"`
}

// Flags is the profile as convert flags.
func (p Profile) Flags() string {
	return fmt.Sprintf("--format %s --recipe %s --experts %s", p.Format, p.Recipe, p.Experts)
}

// profiles lists every combination convert accepts, defaults first. No
// --experts mxfp4: it packs BF16 experts, and the release's are MXFP4 already.
func profiles() []Profile {
	var out []Profile
	for _, f := range []string{"modelopt", "deepseek", "compressed-tensors"} {
		for _, r := range convert.RecipeNames() {
			for _, e := range []string{"keep", "nvfp4", "bf16", "fp8"} {
				if e != "nvfp4" || f == "modelopt" { // convert refuses nvfp4 in other formats
					out = append(out, Profile{Format: f, Recipe: r, Experts: e})
				}
			}
		}
	}
	return out
}

// releaseFacts are the release's facts (synth's full-size K3 layout).
var releaseFacts = sync.OnceValue(func() *Facts {
	raw, err := model.FamilyConfigJSON("", model.ScaleFull)
	if err != nil {
		panic(err)
	}
	cfg, err := model.ParseConfig(raw)
	if err != nil {
		panic(err)
	}
	sc, err := scannerFor(raw, nil)
	if err != nil {
		panic(err)
	}
	for i := range cfg.NumShards() {
		specs := cfg.ShardTensors(i)
		ts := make([]safetensors.TensorInfo, len(specs))
		for j, sp := range specs {
			n, _ := safetensors.ByteSize(sp.DType, sp.Shape)
			ts[j] = safetensors.TensorInfo{Name: sp.Name, DType: sp.DType, Shape: sp.Shape, End: n}
		}
		sc.file(ts)
	}
	return sc.finish()
})

// predict is the facts of what convert writes from a checkpoint of facts src
// under profile p (one of profiles()): the recipe's groups become FP8 in the
// format's scale layout (declared FP8_PB_WO under ModelOpt), the experts as
// --experts says. Bytes are estimated from the source's (FP8 half of BF16;
// NVFP4 18/17 of MXFP4: 4.5 bits per value against 4.25).
func predict(src *Facts, p Profile) (*Facts, error) {
	r, err := convert.Lookup(p.Recipe)
	if err != nil {
		return nil, err
	}
	out, sc, algo := &Facts{}, scale(""), ""
	switch p.Format {
	case "modelopt":
		out.Convention, out.Method, sc, algo = modelOpt, "modelopt_mixed", scale4D, "FP8_PB_WO"
	case "deepseek":
		out.Convention, out.Method, sc = deepSeek, "fp8", scaleInv
	default:
		out.Convention, out.Method, sc = release, "compressed-tensors", scale2D
	}
	for _, sp := range src.Parts {
		q := sp
		switch {
		case sp.Group == model.GroupExperts:
			switch {
			case p.Experts == "keep":
			case p.Experts == "nvfp4" && sp.Form == mXFP4:
				q.Form, q.Declared, q.Bytes = nVFP4, "NVFP4", sp.Bytes*18/17
			case p.Experts == "bf16" && sp.Form == mXFP4:
				q.Form, q.Bytes = BF16, sp.Bytes*64/17
			case p.Experts == "bf16" && sp.Form == nVFP4:
				q.Form, q.Bytes = BF16, sp.Bytes*64/18
			case p.Experts == "bf16" && sp.Form == BF16:
			default:
				return nil, fmt.Errorf("%w: --experts %s of %s experts", errNotApplicable, p.Experts, sp.Form)
			}
		case r.Name == convert.BF16 && (sp.Form == fP8 || sp.Form == nVFP4):
			q.Form, q.Scale, q.Declared, q.Bytes = BF16, "", "", sp.Bytes*2
		case sp.Form == BF16 && r.Quantize.Has(sp.Group):
			q.Form, q.Scale, q.Declared, q.Bytes = fP8, sc, algo, sp.Bytes/2
		}
		if q.Form == fP8 && out.Convention == release {
			out.Convention = compressedTensors
		}
		out.Parts = append(out.Parts, q)
	}
	// Only MXFP4 experts quantized: convert keeps the source's
	// compressed-tensors description; nothing quantized: no config.
	if !out.has(model.AllGroups(), []form{fP8, nVFP4}) {
		out.Convention, out.Method = noQuant, ""
		if out.has(model.AllGroups(), []form{mXFP4}) {
			out.Convention, out.Method = release, "compressed-tensors"
		}
	}
	return out, nil
}

// choice is the profile chosen for a target, with its verdict and reasons.
type choice struct {
	Profile   Profile  `json:"profile"`
	Verdict   Verdict  `json:"verdict"`
	Why       []string `json:"why"`
	GPUBytes  int64    `json:"gpu_bytes"`  // predicted weight memory per GPU (see cost)
	DiskBytes int64    `json:"disk_bytes"` // what is written
}

// cost orders conversions for a target, lower first: [0] the weight memory
// per GPU once loaded (a dequantized part counts as BF16) under K3's
// deployment, attention DP with EP16 experts (every rank holds the
// non-expert weights and 1/epRanks of the routed experts); [1] the bytes on disk.
type cost [2]int64

const epRanks = 16

func (a cost) less(b cost) bool { return a[0] < b[0] || a[0] == b[0] && a[1] < b[1] }

func costOf(v Verdict) cost {
	var c cost
	for _, p := range v.parts {
		b := p.bytes
		c[1] += b
		if p.outcome == dequantized && p.form == fP8 {
			b *= 2
		}
		if p.group == model.GroupExperts {
			b /= epRanks
		}
		c[0] += b
	}
	return c
}

// Choose picks, among the profiles allowed (nil: all but those decoding
// quantized experts to BF16), the one whose output engine on gpu ("": every
// GPU) loads (nothing refused, wrong or unknown) at the least cost, ties to
// the earlier profile. src is the source's facts (nil: the release). It fails
// with errNoGain when the source as it is loads at no higher cost, and with
// ErrNoTarget, naming a reason, when no profile (or none allowed) loads.
func Choose(src *Facts, engine string, gpu GPU, allowed func(Profile) bool) (choice, error) {
	name, err := lookupEngine(engine)
	if err != nil {
		return choice{}, err
	}
	if src == nil {
		src = releaseFacts()
	}
	var best *choice
	var bestCost cost
	var refusals []string
	decoded := false // a profile skipped because it decodes the experts
	for _, p := range profiles() {
		if allowed != nil && !allowed(p) {
			continue
		}
		if allowed == nil && p.Experts == "bf16" && !src.has(model.Groups(model.GroupExperts), []form{BF16}) {
			decoded = true // quadruples the experts: never chosen unasked
			continue
		}
		f, err := predict(src, p)
		if errors.Is(err, errNotApplicable) {
			continue
		}
		if err != nil {
			return choice{}, err
		}
		v, c, why := loads(f, name, gpu)
		if why != "" {
			refusals = append(refusals, p.Flags()+" "+why)
			continue
		}
		if best == nil || c.less(bestCost) {
			best, bestCost = &choice{Profile: p, Verdict: v, GPUBytes: c[0], DiskBytes: c[1]}, c
		}
	}
	if best == nil && allowed != nil && len(refusals) > 0 {
		return choice{}, fmt.Errorf("%w: with the flags given, no conversion loads in %s on %s: %s", ErrNoTarget, name, where(gpu), refusals[0])
	}
	if _, c, why := loads(src, name, gpu); why == "" && (best == nil || !bestCost.less(c)) {
		return choice{}, fmt.Errorf("%w: %s on %s loads the source as it is, and no conversion k3ckpt writes keeps less in GPU memory or on disk; serve it unconverted (k3ckpt check SRC shows why)", errNoGain, name, where(gpu))
	}
	if best == nil {
		if len(refusals) == 0 {
			return choice{}, fmt.Errorf("%w: the flags given leave no conversion to choose from", ErrNoTarget)
		}
		hint := ""
		if decoded {
			hint = "; only decoding the experts to BF16 is left (ask for it: --experts bf16; it quadruples their memory)"
		}
		return choice{}, fmt.Errorf("%w: none of k3ckpt's conversions that keep the experts quantized is known to load in %s on %s; e.g. %s%s", ErrNoTarget, name, where(gpu), refusals[0], hint)
	}
	best.Why = reasons(best.Verdict)
	return *best, nil
}

// Errors of Choose and predict.
var (
	// errNoGain: the source as it is serves as well as any conversion.
	errNoGain = errors.New("nothing to convert")
	// ErrNoTarget: no conversion loads in the target.
	ErrNoTarget = errors.New("no conversion for this target")
	// errNotApplicable: the source has nothing for the profile's --experts to do.
	errNotApplicable = errors.New("not applicable")
)

func where(gpu GPU) string { return cmp.Or(string(gpu), "every GPU") }

// loads evaluates f for engine on gpu ("": every GPU): the verdict and cost
// on the costliest GPU, or why it does not load ("" when it does).
func loads(f *Facts, engine string, gpu GPU) (Verdict, cost, string) {
	var v Verdict
	var c cost
	for i, g := range gpusOf(gpu) {
		gv, err := evaluate(f, engine, g)
		if err != nil {
			return v, c, err.Error()
		}
		if gv.Outcome != Resident && gv.Outcome != dequantized {
			return v, c, fmt.Sprintf("on %s: %s", g, gv.Summary())
		}
		if gc := costOf(gv); i == 0 || c.less(gc) {
			v, c = gv, gc
		}
	}
	return v, c, ""
}

// reasons lists, per outcome other than plain BF16, the groups and why.
func reasons(v Verdict) []string {
	var out []string
	for _, it := range v.Items {
		if it.Rule == "" {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s %s: %s [%s]", compactGroups(it.Groups), it.Form, it.Outcome, it.Why, it.Source))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ParseTarget reads ENGINE[/GPU] (GPU sm90 or sm100; "" when not given).
func ParseTarget(s string) (string, GPU, error) {
	e, g, ok := strings.Cut(s, "/")
	name, err := lookupEngine(e)
	if err != nil {
		return "", "", err
	}
	if !ok {
		return name, "", nil
	}
	gpu, err := ParseGPU(g)
	return name, gpu, err
}
