package convert

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// checkAgainstConfig compares every tensor of a source file with its
// catalog dtype and shape, and with the expert format the config declares:
// the output config must not lie about them.
func checkAgainstConfig(root string, f *safetensors.File, cfg *model.Config, catalog func(string) (safetensors.TensorSpec, bool)) error {
	for _, t := range f.Tensors {
		if err := checkExpertFormat(cfg.Classifier, t, cfg.Experts); err != nil {
			return fmt.Errorf("file %s: %w", filepath.Join(root, f.Path), err)
		}
		s, ok := catalog(t.Name)
		if !ok {
			continue
		}
		// A block-FP8 weight (a converted source) stands where the catalog
		// has its BF16 original, with the same shape.
		fp8 := t.DType == safetensors.F8_E4M3 && s.DType == safetensors.BF16 && len(t.Shape) == 2
		if (s.DType != t.DType && !fp8) || !slices.Equal(s.Shape, t.Shape) {
			return fmt.Errorf("file %s: tensor %s: %w: %s %v, config.json implies %s %v",
				filepath.Join(root, f.Path), t.Name, errConfigMismatch, t.DType, t.Shape, s.DType, s.Shape)
		}
	}
	return nil
}

// checkExpertFormat checks one tensor against the declared expert format.
func checkExpertFormat(cls *model.Classifier, t safetensors.TensorInfo, experts model.ExpertFormat) error {
	packed := t.DType == safetensors.U8
	mxfp4 := experts == model.ExpertsMXFP4
	// The name is read only for a tensor stored otherwise than declared.
	wrong := mxfp4 && !packed || experts == model.ExpertsBF16 && packed
	if !wrong || cls.Classify(t.Name) != model.RoutedExperts {
		return nil
	}
	if mxfp4 {
		return fmt.Errorf("tensor %s: %w: a routed expert stored as %s, but config.json declares MXFP4 experts (packed U8)", t.Name, errConfigMismatch, t.DType)
	}
	return fmt.Errorf("tensor %s: %w: a routed expert stored as packed U8, but config.json declares unquantized experts (no MXFP4 quantization_config)", t.Name, errConfigMismatch)
}
