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

// The expert modes.
const (
	ExpertsKeep  ExpertsMode = iota // copied byte for byte
	ExpertsNVFP4                    // MXFP4 cast to NVFP4 (NVIDIA's Kimi-K3 export)
	ExpertsBF16                     // MXFP4, NVFP4 or block FP8 decoded to BF16
	ExpertsMXFP4                    // BF16 packed to MXFP4 as compressed-tensors does
	ExpertsFP8                      // MXFP4 or BF16 to 128×128 block FP8 (Hopper-servable)
)

var expertsModeNames = [...]string{ExpertsKeep: "keep", ExpertsNVFP4: "nvfp4", ExpertsBF16: "bf16", ExpertsMXFP4: "mxfp4", ExpertsFP8: "fp8"}

// ParseNumerics maps a --numerics name ("deepgemm", "modelopt") to its cast.
func ParseNumerics(s string) (quant.Numerics, error) {
	return parseName[quant.Numerics]("numerics", s, numNumerics)
}

const numNumerics = int(quant.ModelOpt) + 1

// checkExecutable refuses option combinations that have no meaning.
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

// SplitReport is one fused group a recipe splits, by fusion and member
// choice: engines that build the fusion load it with one method for all
// members, wrongly or not at all.
type SplitReport struct {
	Fused     string   `json:"fused"`  // in_proj_qkvgfab, gate_up_proj, …
	Parent    string   `json:"parent"` // self_attn, shared_experts, mlp
	Engines   []string `json:"engines"`
	Quantized []string `json:"quantized"`
	Kept      []string `json:"kept"`
	Layers    int      `json:"layers"`  // modules split this way
	Example   string   `json:"example"` // one of them
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

// RecipeSplits reports the fused groups split by outs (PlanTensors' under opts).
func RecipeSplits(outs []outputTensor, opts Options) []SplitReport {
	ms := newModuleSet(opts.classifier())
	ms.add(outs)
	m := ms.sorted()
	return summarizeSplits(model.FindSplits(m.fp8, m.kept))
}
