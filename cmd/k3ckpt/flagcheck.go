package main

import (
	"fmt"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
)

// checkOptionPairs refuses, in the flags' terms, the combinations the
// converter cannot carry out, before anything is opened: the library says
// only that a format is unknown.
func checkOptionPairs(o convert.Options) error {
	if o.Experts == convert.ExpertsNVFP4 && o.Format != model.ModelOpt {
		return fmt.Errorf("--experts nvfp4 does not combine with --format %s: only --format %s describes NVFP4 experts (ModelOpt's hf_quant_config); use --format %[2]s or keep the experts MXFP4 (drop --experts)",
			o.Format, model.ModelOpt)
	}
	if o.Numerics == quant.ModelOpt && o.ScaleFmt != quant.ScaleFP32 {
		return fmt.Errorf("--numerics modelopt does not combine with --scale-fmt %s: ModelOpt's block scales are BF16 values, stored as %s; use --scale-fmt %[2]s or --numerics %s",
			o.ScaleFmt, quant.ScaleFP32, quant.DeepGEMM)
	}
	return nil
}
