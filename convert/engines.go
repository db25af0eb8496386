package convert

import (
	"fmt"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
)

// ExpertsMode says what a conversion does with the routed experts.
type ExpertsMode = enum[expertsModeSet]

type expertsModeSet struct{}

func (expertsModeSet) set() ([]string, string, string) {
	return expertsModeNames[:], "ExpertsMode", "experts mode"
}

const (
	// ExpertsKeep copies the experts byte for byte (MXFP4 in K3).
	ExpertsKeep ExpertsMode = iota
	// ExpertsNVFP4 casts MXFP4 experts to NVFP4 (NVIDIA's Kimi-K3 export).
	ExpertsNVFP4
	// ExpertsBF16 decodes quantized experts (MXFP4, NVFP4, block FP8) to BF16.
	ExpertsBF16
	// ExpertsMXFP4 packs BF16 experts into the release's compressed-tensors
	// mxfp4-pack-quantized format, bit for bit as compressed-tensors does.
	ExpertsMXFP4
	// ExpertsFP8 turns MXFP4 (or BF16) experts into 128×128 block FP8 in
	// the chosen --format, the Hopper-servable form of K3's experts.
	ExpertsFP8
)

var expertsModeNames = [...]string{ExpertsKeep: "keep", ExpertsNVFP4: "nvfp4", ExpertsBF16: "bf16", ExpertsMXFP4: "mxfp4", ExpertsFP8: "fp8"}

// parseExpertsMode maps an --experts name to its mode.
func parseExpertsMode(s string) (ExpertsMode, error) { return parseEnum[expertsModeSet](s) }

// ParseNumerics maps a --numerics name ("deepgemm", "modelopt") to the quant
// package's choice of block-FP8 cast, the one definition of it.
func ParseNumerics(s string) (quant.Numerics, error) {
	return parseName[quant.Numerics]("numerics", s, numNumerics)
}

// numNumerics is how many quant.Numerics values there are.
const numNumerics = int(quant.ModelOpt) + 1

// checkExecutable refuses, before anything is planned, option combinations
// that have no meaning: NVFP4 experts are described only by ModelOpt's
// config; ModelOpt's FP8_PB_WO cast has BF16 scales (stored as F32), never
// UE8M0 powers of two, and no reference for FP8 experts (NVIDIA's exporter
// casts none with it, and it makes an all-zero tile NaN codes under scale 0).
func checkExecutable(opts Options) error {
	if opts.Experts == ExpertsNVFP4 && opts.Format != modelOpt {
		return fmt.Errorf("%w: --experts nvfp4 is described only by --format modelopt, not %s", errUnknownFormat, opts.Format)
	}
	if opts.Experts == ExpertsFP8 && opts.Numerics == quant.ModelOpt {
		return fmt.Errorf("%w: --experts fp8 takes --numerics deepgemm (DeepGEMM's per_block_cast_to_fp8; ModelOpt's cast makes all-zero tiles NaN codes under scale 0, and NVIDIA casts no experts with it); it works with every --format (modelopt, deepseek, compressed-tensors) and --scale-fmt fp32 or ue8m0", errUnknownFormat)
	}
	if opts.Numerics == quant.ModelOpt && opts.ScaleFmt != quant.ScaleFP32 {
		return fmt.Errorf("%w: --numerics modelopt writes ModelOpt's BF16 block scales as fp32, not --scale-fmt %s", errUnknownFormat, opts.ScaleFmt)
	}
	if int(opts.Numerics) >= numNumerics || int(opts.Experts) >= len(expertsModeNames) {
		return fmt.Errorf("%w: numerics %v, experts %v", errUnknownFormat, opts.Numerics, opts.Experts)
	}
	return nil
}

// SplitReport summarizes the fused groups a recipe splits: one line per
// fusion and member choice, with how many layers it concerns. Engines that
// build the fusion then load it with one method for all members: wrongly,
// or not at all.
type SplitReport struct {
	// Fused is the fused layer's name (in_proj_qkvgfab, gate_up_proj, …).
	Fused string `json:"fused"`
	// Parent is the members' parent module (self_attn, shared_experts, mlp).
	Parent string `json:"parent"`
	// Engines build the fusion.
	Engines []string `json:"engines"`
	// Quantized and Kept are the members on each side.
	Quantized []string `json:"quantized"`
	Kept      []string `json:"kept"`
	// Layers counts the modules split this way; Example names one.
	Layers  int    `json:"layers"`
	Example string `json:"example"`
}

// String is the report's line for --dry-run and inspect.
func (s SplitReport) String() string {
	return fmt.Sprintf("splits %s.%s in %d layers (%s FP8, %s kept); the engines that fuse it (%s) give one method to all its members and load it wrongly or not at all (e.g. %s)",
		s.Parent, s.Fused, s.Layers, strings.Join(s.Quantized, "/"), strings.Join(s.Kept, "/"), strings.Join(s.Engines, ", "), s.Example)
}

func summarizeSplits(splits []model.Split) []SplitReport {
	var out []SplitReport
	for _, sp := range splits {
		i := slices.IndexFunc(out, func(r SplitReport) bool {
			return r.Fused == sp.Group.Name && r.Parent == sp.Group.Parent &&
				slices.Equal(r.Quantized, sp.Quantized) && slices.Equal(r.Kept, sp.Kept)
		})
		if i < 0 {
			out = append(out, SplitReport{Fused: sp.Group.Name, Parent: sp.Group.Parent, Engines: sp.Group.Engines,
				Quantized: sp.Quantized, Kept: sp.Kept, Example: sp.Module})
			i = len(out) - 1
		}
		out[i].Layers++
	}
	return out
}

// RecipeSplits reports, from tensor specs alone (inspect --recipe), the fused
// groups a recipe splits in a checkpoint: outs are what PlanTensors planned
// for it under opts.
func RecipeSplits(outs []outputTensor, opts Options) []SplitReport {
	ms := newModuleSet(opts.classifier())
	ms.add(outs)
	m := ms.sorted()
	return summarizeSplits(model.FindSplits(m.fp8, m.kept))
}
