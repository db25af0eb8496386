package convert

// v4ExpertDTypeKey is DeepSeek-V4's config key for the routed experts'
// dtype: "fp4" (the release), "fp8" (Flash-Base); absent, the experts are
// the model's default dtype (inference/model.py MoE: expert_dtype None,
// BF16).
const v4ExpertDTypeKey = "expert_dtype"

// setV4ExpertDType makes a DeepSeek-V4 config's expert_dtype say what the
// output's routed experts hold: removed for BF16 experts, "fp8" for block
// FP8 ones, left as it is otherwise. A config without the key is left
// alone.
func setV4ExpertDType(raw map[string]any, opts Options) {
	if _, ok := raw[v4ExpertDTypeKey]; !ok {
		return
	}
	switch opts.Experts {
	case ExpertsBF16:
		delete(raw, v4ExpertDTypeKey)
	case ExpertsFP8:
		raw[v4ExpertDTypeKey] = "fp8"
	}
}
