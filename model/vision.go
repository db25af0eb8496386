package model

// visionConfig is the vision tower and projector geometry, read from the
// released vision_config fields.
type visionConfig struct {
	Hidden       int64 // vt_hidden_size
	Layers       int64 // vt_num_hidden_layers
	Intermediate int64 // vt_intermediate_size
	Heads        int64 // vt_num_attention_heads
	QKVHidden    int64 // qkv_hidden_size: the attention's inner width (wqkv is [3 × it, Hidden])
	HeadDim      int64 // QKVHidden / Heads
	PatchSize    int64 // patch_size
	Channels     int64 // num_channels; 3 (RGB) when absent, as in the release
	PosEmbH      int64 // init_pos_emb_height
	PosEmbW      int64 // init_pos_emb_width
	MergeH       int64 // merge_kernel_size[0]
	MergeW       int64 // merge_kernel_size[1]
}

// projIn is the projector's input width: MergeH × MergeW merged patches of
// Hidden each (mm_projector.proj.0 is [projIn, projIn]). The config's
// mm_hidden_size does not enter the shapes.
func (v *visionConfig) projIn() int64 { return v.Hidden * v.MergeH * v.MergeW }

func (c *Config) parseVision(p *fields, top jobj) {
	v, ok := p.object(top, "vision_config", false)
	if !ok {
		return
	}
	vc := &visionConfig{}
	vc.Hidden = p.size(v, "vt_hidden_size", maxDim)
	vc.Layers = p.size(v, "vt_num_hidden_layers", maxLayers)
	vc.Intermediate = p.size(v, "vt_intermediate_size", maxDim)
	vc.Heads = p.size(v, "vt_num_attention_heads", maxDim)
	vc.QKVHidden = p.size(v, "qkv_hidden_size", maxDim)
	if p.err != nil {
		return
	}
	if vc.QKVHidden%vc.Heads != 0 {
		p.fail(v.name("qkv_hidden_size"), "%d is not a multiple of vt_num_attention_heads %d", vc.QKVHidden, vc.Heads)
		return
	}
	vc.HeadDim = vc.QKVHidden / vc.Heads
	vc.PatchSize = p.size(v, "patch_size", 4096)
	vc.Channels = p.sizeOr(v, "num_channels", 1, 64, 3)
	vc.PosEmbH = p.size(v, "init_pos_emb_height", 4096)
	vc.PosEmbW = p.size(v, "init_pos_emb_width", 4096)
	mv, ok := p.get(v, "merge_kernel_size", true)
	if !ok {
		return
	}
	arr, ok := mv.([]any)
	if !ok || len(arr) != 2 {
		p.fail(v.name("merge_kernel_size"), "must be a list of two sizes, got %s", describe(mv))
		return
	}
	mh, _ := p.integer(v.name("merge_kernel_size")+"[0]", arr[0])
	mw, _ := p.integer(v.name("merge_kernel_size")+"[1]", arr[1])
	if p.err == nil && (mh <= 0 || mw <= 0 || mh > 64 || mw > 64) {
		p.fail(v.name("merge_kernel_size"), "sizes must be in 1..64, got [%d, %d]", mh, mw)
	}
	vc.MergeH, vc.MergeW = mh, mw
	p.note(v.name("merge_kernel_size")+"[0]", mh)
	p.note(v.name("merge_kernel_size")+"[1]", mw)
	if th := p.sizeOr(v, "text_hidden_size", 1, maxDim, c.Hidden); p.err == nil && th != c.Hidden {
		p.fail(v.name("text_hidden_size"), "must equal text_config.hidden_size %d, got %d", c.Hidden, th)
	}
	if p.err == nil && vc.projIn() > maxDim {
		p.fail(v.name("merge_kernel_size"), "projector input %d × %d × %d is over %d", vc.Hidden, mh, mw, maxDim)
	}
	if p.err == nil {
		c.Vision = vc
	}
}
