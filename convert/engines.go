package convert

import (
	"fmt"
	"strings"
)

// ExpertsMode says what a conversion does with the routed experts.
type ExpertsMode uint8

const (
	// ExpertsKeep copies the experts byte for byte (MXFP4 in K3).
	ExpertsKeep ExpertsMode = iota
	// ExpertsNVFP4 casts MXFP4 experts to NVFP4 (NVIDIA's Kimi-K3 export).
	ExpertsNVFP4

	numExpertsModes = int(ExpertsNVFP4) + 1
)

var expertsModeNames = [numExpertsModes]string{ExpertsKeep: "keep", ExpertsNVFP4: "nvfp4"}

// String is the --experts name.
func (e ExpertsMode) String() string {
	if int(e) < numExpertsModes {
		return expertsModeNames[e]
	}
	return fmt.Sprintf("ExpertsMode(%d)", uint8(e))
}

// MarshalText writes the name.
func (e ExpertsMode) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// ParseExpertsMode maps an --experts name to its mode.
func ParseExpertsMode(s string) (ExpertsMode, error) {
	for i, n := range expertsModeNames {
		if n == s {
			return ExpertsMode(i), nil
		}
	}
	return 0, fmt.Errorf("%w: experts mode %q (known: %s)", ErrUnknownFormat, s, strings.Join(expertsModeNames[:], ", "))
}

// Numerics is the block-FP8 cast a conversion computes.
type Numerics uint8

const (
	// NumericsDeepGEMM is DeepGEMM's per_block_cast_to_fp8 (fp32 scale
	// amax/448 with a 1e-4 amax floor), the default.
	NumericsDeepGEMM Numerics = iota
	// NumericsModelOpt is ModelOpt's FP8_PB_WO cast (scale bf16(amax/448)
	// stored as fp32, no floor): what NVIDIA's Kimi-K3 checkpoint holds.
	NumericsModelOpt

	numNumerics = int(NumericsModelOpt) + 1
)

var numericsNames = [numNumerics]string{NumericsDeepGEMM: "deepgemm", NumericsModelOpt: "modelopt"}

// String is the --numerics name.
func (n Numerics) String() string {
	if int(n) < numNumerics {
		return numericsNames[n]
	}
	return fmt.Sprintf("Numerics(%d)", uint8(n))
}

// MarshalText writes the name.
func (n Numerics) MarshalText() ([]byte, error) { return []byte(n.String()), nil }

// ParseNumerics maps a --numerics name to its cast.
func ParseNumerics(s string) (Numerics, error) {
	for i, n := range numericsNames {
		if n == s {
			return Numerics(i), nil
		}
	}
	return 0, fmt.Errorf("%w: numerics %q (known: %s)", ErrUnknownFormat, s, strings.Join(numericsNames[:], ", "))
}

// ErrUnavailable: an option this build cannot carry out yet.
var ErrUnavailable = fmt.Errorf("not available in this build")

// checkExecutable refuses, before anything is planned, the options whose
// numerics the executor does not have yet (the NVFP4 cast and ModelOpt's
// FP8_PB_WO cast come from package quant), rather than writing something
// other than what was asked.
func checkExecutable(opts Options) error {
	if opts.Experts == ExpertsNVFP4 && opts.Format != ModelOpt {
		return fmt.Errorf("%w: --experts nvfp4 is described only by --format modelopt, not %s", ErrUnknownFormat, opts.Format)
	}
	if opts.Experts == ExpertsNVFP4 {
		return fmt.Errorf("--experts nvfp4: %w (the MXFP4→NVFP4 cast is not wired into the executor yet; inspect --experts nvfp4 gives the size)", ErrUnavailable)
	}
	if opts.Numerics == NumericsModelOpt {
		return fmt.Errorf("--numerics modelopt: %w (ModelOpt's FP8_PB_WO cast is not wired into the executor yet)", ErrUnavailable)
	}
	return nil
}
