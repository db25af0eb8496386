package model

// parseVision checks vision_config, whose keys the schema's vision units
// read as recorded (c.values).
func (c *Config) parseVision(p *fields, top jobj) {
	v, ok := p.object(top, "vision_config", false)
	if !ok {
		return
	}
	hidden := p.size(v, "vt_hidden_size", maxDim)
	p.size(v, "vt_num_hidden_layers", maxLayers)
	p.size(v, "vt_intermediate_size", maxDim)
	heads := p.size(v, "vt_num_attention_heads", maxDim)
	qkv := p.size(v, "qkv_hidden_size", maxDim) // the attention's inner width (wqkv is [3 × it, hidden])
	if p.err != nil {
		return
	}
	if qkv%heads != 0 {
		p.fail(v.name("qkv_hidden_size"), "%d is not a multiple of vt_num_attention_heads %d", qkv, heads)
		return
	}
	p.size(v, "patch_size", 4096)
	p.sizeOr(v, "num_channels", 1, 64, 3) // RGB when absent, as in the release
	p.size(v, "init_pos_emb_height", 4096)
	p.size(v, "init_pos_emb_width", 4096)
	mk := v.name("merge_kernel_size")
	mv, ok := p.get(v, "merge_kernel_size", true)
	if !ok {
		return
	}
	arr, ok := mv.([]any)
	if !ok || len(arr) != 2 {
		p.fail(mk, "must be a list of two sizes, got %s", describe(mv))
		return
	}
	mh, _ := p.integer(mk+"[0]", arr[0])
	mw, _ := p.integer(mk+"[1]", arr[1])
	if p.err == nil && (mh <= 0 || mw <= 0 || mh > 64 || mw > 64) {
		p.fail(mk, "sizes must be in 1..64, got [%d, %d]", mh, mw)
	}
	p.read[mk+"[0]"], p.read[mk+"[1]"] = mh, mw
	if th := p.sizeOr(v, "text_hidden_size", 1, maxDim, c.Hidden); p.err == nil && th != c.Hidden {
		p.fail(v.name("text_hidden_size"), "must equal text_config.hidden_size %d, got %d", c.Hidden, th)
	}
	// The projector's input is mh × mw merged patches (mm_projector.proj.0 is
	// [in, in]); mm_hidden_size does not enter the shapes.
	if p.err == nil && hidden*mh*mw > maxDim {
		p.fail(mk, "projector input %d × %d × %d is over %d", hidden, mh, mw, maxDim)
	}
	c.Vision = p.err == nil
}
