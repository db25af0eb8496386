package model

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The stable group names, written out by hand: recipes and layouts store them.
func TestGroupNames(t *testing.T) {
	t.Parallel()
	want := []string{"other",
		"kda.q_proj", "kda.k_proj", "kda.v_proj", "kda.g_proj", "kda.o_proj", "kda.f_a_proj", "kda.f_b_proj",
		"kda.b_proj", "kda.conv1d", "kda.dt_bias", "kda.A_log", "kda.o_norm",
		"mla.q_a_proj", "mla.q_a_layernorm", "mla.q_b_proj", "mla.kv_a_proj_with_mqa", "mla.kv_a_layernorm",
		"mla.kv_b_proj", "mla.o_proj", "mla.g_proj",
		"dense_mlp.gate_proj", "dense_mlp.up_proj", "dense_mlp.down_proj",
		"router.gate", "router.e_score_correction_bias", "latent.down_proj", "latent.up_proj", "latent.norm",
		"shared_experts.gate_proj", "shared_experts.up_proj", "shared_experts.down_proj", "experts",
		"layer_norms", "attn_res", "embedding", "lm_head", "final_norms", "vision_tower", "mm_projector"}
	if numK3Groups != len(want) {
		t.Fatalf("%d groups, want %d", numK3Groups, len(want))
	}
	for i, n := range want {
		g := Group(i)
		if g.String() != n {
			t.Errorf("group %d is %q, want %q", i, g, n)
		}
		if back, err := ParseGroup(n); err != nil || back != g {
			t.Errorf("ParseGroup(%q) = %v, %v", n, back, err)
		}
		// The component is the family's, read off the name.
		fam := map[string]Component{"kda": attentionKDA, "mla": attentionMLA, "dense_mlp": denseMLP,
			"router": router, "latent": latentMoE, "shared_experts": sharedExperts, "experts": RoutedExperts,
			"layer_norms": norms, "attn_res": norms, "final_norms": norms, "embedding": embedding,
			"lm_head": lMHead, "vision_tower": vision, "mm_projector": vision, "other": Other}
		if c := fam[strings.SplitN(n, ".", 2)[0]]; g.Component() != c {
			t.Errorf("%s: component %v, want %v", n, g.Component(), c)
		}
	}
	if _, err := ParseGroup("kda.q"); err == nil {
		t.Error("ParseGroup accepted an unknown name")
	}
}

func TestParseGroupSet(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want GroupSet
	}{
		{"", 0},
		{"experts", Groups(GroupExperts)},
		{" mla.q_b_proj , kda.q_proj", Groups(groupMLAQB, groupKDAQ)},
		{"shared_experts", Groups(groupSharedGate, groupSharedUp, groupSharedDown)},
		{"latent,dense_mlp.down_proj", Groups(groupLatentDown, groupLatentUp, groupLatentNorm, groupDenseDown)},
		{"router", Groups(groupRouterGate, groupRouterBias)},
	}
	for _, c := range cases {
		got, err := ParseGroupSet(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseGroupSet(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		if back, err := ParseGroupSet(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q: %v, %v", got, back, err)
		}
	}
	kda, err := ParseGroupSet("kda")
	if err != nil || len(kda.members()) != 12 || kda.Has(groupMLAO) || !kda.Has(groupKDAALog) {
		t.Errorf("kda family: %v, %v", kda, err)
	}
	for _, bad := range []string{"kda.x", "nope", "kda,,mla", "other.x"} {
		if _, err := ParseGroupSet(bad); err == nil || !strings.Contains(err.Error(), "unknown tensor group") {
			t.Errorf("ParseGroupSet(%q) = %v", bad, err)
		}
	}
	if all := AllGroups(); all.Has(groupOther) || len(all.members()) != NumAllGroups()-1 || !all.Has(groupLMHead) {
		t.Errorf("AllGroups() = %v", all)
	}
}

// Names written out by hand from the released checkpoint's tensor list,
// under both prefixes and with companions of every convention.
func TestParseName(t *testing.T) {
	t.Parallel()
	type want struct {
		g      Group
		layer  int
		expert int
		proj   expertProjection
		module string
		role   Role
	}
	for _, P := range []string{"language_model.model.", "model."} {
		L := P + "layers."
		cases := map[string]want{
			L + "0.self_attn.q_proj.weight":                          {groupKDAQ, 0, -1, 0, L + "0.self_attn.q_proj", RoleWeight},
			L + "0.self_attn.q_proj.weight_scale_inv":                {groupKDAQ, 0, -1, 0, L + "0.self_attn.q_proj", roleScaleInv},
			L + "1.self_attn.k_proj.weight_scale":                    {groupKDAK, 1, -1, 0, L + "1.self_attn.k_proj", roleScale},
			L + "1.self_attn.v_proj.input_scale":                     {groupKDAV, 1, -1, 0, L + "1.self_attn.v_proj", roleInputScale},
			L + "2.self_attn.g_proj.weight":                          {groupKDAG, 2, -1, 0, L + "2.self_attn.g_proj", RoleWeight},
			L + "3.self_attn.g_proj.weight":                          {groupMLAG, 3, -1, 0, L + "3.self_attn.g_proj", RoleWeight},
			L + "2.self_attn.o_proj.weight_scale_2":                  {groupKDAO, 2, -1, 0, L + "2.self_attn.o_proj", roleScale2},
			L + "92.self_attn.o_proj.weight":                         {groupMLAO, 92, -1, 0, L + "92.self_attn.o_proj", RoleWeight},
			L + "5.self_attn.f_a_proj.weight":                        {groupKDAFA, 5, -1, 0, L + "5.self_attn.f_a_proj", RoleWeight},
			L + "5.self_attn.f_b_proj.weight":                        {groupKDAFB, 5, -1, 0, L + "5.self_attn.f_b_proj", RoleWeight},
			L + "5.self_attn.b_proj.weight":                          {groupKDAB, 5, -1, 0, L + "5.self_attn.b_proj", RoleWeight},
			L + "5.self_attn.v_conv1d.weight":                        {groupKDAConv, 5, -1, 0, L + "5.self_attn.v_conv1d", RoleWeight},
			L + "5.self_attn.dt_bias":                                {groupKDADTBias, 5, -1, 0, L + "5.self_attn", roleParam},
			L + "5.self_attn.A_log":                                  {groupKDAALog, 5, -1, 0, L + "5.self_attn", roleParam},
			L + "5.self_attn.o_norm.weight":                          {groupKDAONorm, 5, -1, 0, L + "5.self_attn.o_norm", RoleWeight},
			L + "7.self_attn.q_a_proj.weight":                        {groupMLAQA, 7, -1, 0, L + "7.self_attn.q_a_proj", RoleWeight},
			L + "7.self_attn.q_a_layernorm.weight":                   {groupMLAQANorm, 7, -1, 0, L + "7.self_attn.q_a_layernorm", RoleWeight},
			L + "7.self_attn.q_b_proj.weight_scale":                  {groupMLAQB, 7, -1, 0, L + "7.self_attn.q_b_proj", roleScale},
			L + "7.self_attn.kv_a_proj_with_mqa.weight":              {groupMLAKVA, 7, -1, 0, L + "7.self_attn.kv_a_proj_with_mqa", RoleWeight},
			L + "7.self_attn.kv_a_layernorm.weight":                  {groupMLAKVANorm, 7, -1, 0, L + "7.self_attn.kv_a_layernorm", RoleWeight},
			L + "7.self_attn.kv_b_proj.weight":                       {groupMLAKVB, 7, -1, 0, L + "7.self_attn.kv_b_proj", RoleWeight},
			L + "0.mlp.gate_proj.weight":                             {groupDenseGate, 0, -1, 0, L + "0.mlp.gate_proj", RoleWeight},
			L + "0.mlp.up_proj.weight_scale_inv":                     {groupDenseUp, 0, -1, 0, L + "0.mlp.up_proj", roleScaleInv},
			L + "0.mlp.down_proj.weight":                             {groupDenseDown, 0, -1, 0, L + "0.mlp.down_proj", RoleWeight},
			L + "1.block_sparse_moe.gate.weight":                     {groupRouterGate, 1, -1, 0, L + "1.block_sparse_moe.gate", RoleWeight},
			L + "1.block_sparse_moe.gate.e_score_correction_bias":    {groupRouterBias, 1, -1, 0, L + "1.block_sparse_moe.gate", roleParam},
			L + "1.block_sparse_moe.routed_expert_down_proj.weight":  {groupLatentDown, 1, -1, 0, L + "1.block_sparse_moe.routed_expert_down_proj", RoleWeight},
			L + "1.block_sparse_moe.routed_expert_up_proj.weight":    {groupLatentUp, 1, -1, 0, L + "1.block_sparse_moe.routed_expert_up_proj", RoleWeight},
			L + "1.block_sparse_moe.routed_expert_norm.weight":       {groupLatentNorm, 1, -1, 0, L + "1.block_sparse_moe.routed_expert_norm", RoleWeight},
			L + "9.block_sparse_moe.shared_experts.gate_proj.weight": {groupSharedGate, 9, -1, 0, L + "9.block_sparse_moe.shared_experts.gate_proj", RoleWeight},
			L + "9.block_sparse_moe.shared_experts.up_proj.weight":   {groupSharedUp, 9, -1, 0, L + "9.block_sparse_moe.shared_experts.up_proj", RoleWeight},
			L + "9.block_sparse_moe.shared_experts.down_proj.weight_scale_inv": {groupSharedDown, 9, -1, 0,
				L + "9.block_sparse_moe.shared_experts.down_proj", roleScaleInv},
			L + "1.block_sparse_moe.experts.0.w1.weight_packed":  {GroupExperts, 1, 0, expertW1, L + "1.block_sparse_moe.experts.0.w1", RolePacked},
			L + "1.block_sparse_moe.experts.10.w3.weight_scale":  {GroupExperts, 1, 10, expertW3, L + "1.block_sparse_moe.experts.10.w3", roleScale},
			L + "92.block_sparse_moe.experts.895.w2.weight":      {GroupExperts, 92, 895, expertW2, L + "92.block_sparse_moe.experts.895.w2", RoleWeight},
			L + "4.block_sparse_moe.experts.7.w2.weight_scale_2": {GroupExperts, 4, 7, expertW2, L + "4.block_sparse_moe.experts.7.w2", roleScale2},
			L + "4.block_sparse_moe.experts.7.w1.input_scale":    {GroupExperts, 4, 7, expertW1, L + "4.block_sparse_moe.experts.7.w1", roleInputScale},
			L + "4.block_sparse_moe.experts.7.w1.weight_global_scale": {GroupExperts, 4, 7, expertW1,
				L + "4.block_sparse_moe.experts.7.w1", roleGlobalScale},
			L + "4.mlp.experts.3.up_proj.weight":      {GroupExperts, 4, 3, expertW3, L + "4.mlp.experts.3.up_proj", RoleWeight},
			L + "0.input_layernorm.weight":            {groupLayerNorms, 0, -1, 0, L + "0.input_layernorm", RoleWeight},
			L + "0.post_attention_layernorm.weight":   {groupLayerNorms, 0, -1, 0, L + "0.post_attention_layernorm", RoleWeight},
			L + "0.self_attention_res_norm.weight":    {groupAttnRes, 0, -1, 0, L + "0.self_attention_res_norm", RoleWeight},
			L + "0.mlp_res_proj.weight":               {groupAttnRes, 0, -1, 0, L + "0.mlp_res_proj", RoleWeight},
			P + "embed_tokens.weight":                 {groupEmbedding, -1, -1, 0, P + "embed_tokens", RoleWeight},
			P + "norm.weight":                         {groupFinalNorms, -1, -1, 0, P + "norm", RoleWeight},
			P + "output_attn_res_norm.weight":         {groupFinalNorms, -1, -1, 0, P + "output_attn_res_norm", RoleWeight},
			P + "output_attn_res_proj.weight":         {groupFinalNorms, -1, -1, 0, P + "output_attn_res_proj", RoleWeight},
			L + "1.block_sparse_moe.new_thing.weight": {groupOther, 1, -1, 0, L + "1.block_sparse_moe.new_thing", RoleWeight},
			L + "500.self_attn.o_proj.weight":         {groupOther, 500, -1, 0, L + "500.self_attn.o_proj", RoleWeight},
			L + "500.self_attn.q_proj.weight":         {groupKDAQ, 500, -1, 0, L + "500.self_attn.q_proj", RoleWeight},
			P + "rotary_emb.inv_freq":                 {groupOther, -1, -1, 0, P + "rotary_emb", roleParam},
			L + "x.self_attn.q_proj.weight":           {groupOther, -1, -1, 0, L + "x.self_attn.q_proj", RoleWeight},
			L + "3.weight":                            {groupOther, 3, -1, 0, L + "3", RoleWeight},
		}
		for name, w := range cases {
			got := k3Classifier.ParseName(name)
			if got != (TensorName{w.g, w.layer, w.expert, w.proj, w.module, w.role}) {
				t.Errorf("k3Classifier.ParseName(%q) = %+v, want %+v", name, got, w)
			}
		}
	}
	for name, g := range map[string]Group{
		"language_model.lm_head.weight":             groupLMHead,
		"language_model.lm_head.weight_scale":       groupLMHead,
		"lm_head.weight":                            groupLMHead,
		"vision_tower.encoder.blocks.3.wqkv.weight": groupVisionTower,
		"vision_tower.patch_embed.pos_emb.weight":   groupVisionTower,
		"mm_projector.proj.0.weight":                groupMMProjector,
		"mm_projector.post_norm.weight":             groupMMProjector,
		"language_model.mm_projector.proj.2.weight": groupMMProjector,
		"language_model.model.layers.3":             groupOther,
		"language_model.weight":                     groupOther,
		"model.weight":                              groupOther,
		"weight":                                    groupOther,
		"":                                          groupOther,
		".":                                         groupOther,
		"a.b.vision_tower.x":                        groupOther,
		"language_model.model.layers.1.block_sparse_moe.experts.": groupOther,
	} {
		if got := k3Classifier.ParseName(name); got.Group != g || got.Expert != -1 {
			t.Errorf("k3Classifier.ParseName(%q) = %+v, want group %v", name, got, g)
		}
	}
}

// Every tensor of the full catalog has a group, and under both prefixes the
// same one: the schema knows the whole released checkpoint.
func TestParseNameCatalog(t *testing.T) {
	t.Parallel()
	c := mustK3(t)
	cl := c.Classifier
	counts := make([]int, numK3Groups)
	for _, ts := range k3Catalog() {
		n := cl.ParseName(ts.Name)
		if n.Group == groupOther {
			t.Fatalf("%s has no group", ts.Name)
		}
		counts[n.Group]++
		if bare, ok := strings.CutPrefix(ts.Name, "language_model."); ok {
			b := cl.ParseName(bare)
			if b.Group != n.Group || b.Layer != n.Layer || b.Expert != n.Expert || b.Proj != n.Proj {
				t.Fatalf("%s: %+v, bare %+v", ts.Name, n, b)
			}
		}
	}
	// Counts from the released layout: 69 KDA and 24 MLA layers, 92 MoE
	// layers of 896 experts × 6 tensors, 27 vision blocks of 6 + 3 tensors.
	want := map[Group]int{groupKDAQ: 69, groupKDAConv: 3 * 69, groupKDAALog: 69, groupMLAO: 24, groupKDAO: 69,
		groupMLAG: 24, groupDenseGate: 1, groupRouterBias: 92, groupSharedDown: 92, GroupExperts: 92 * 896 * 6,
		groupLayerNorms: 2 * 93, groupAttnRes: 4 * 93, groupFinalNorms: 3, groupEmbedding: 1, groupLMHead: 1,
		groupVisionTower: 27*6 + 3, groupMMProjector: 3}
	for g, n := range want {
		if counts[g] != n {
			t.Errorf("%v: %d tensors, want %d", g, counts[g], n)
		}
	}
}

func TestSplitRole(t *testing.T) {
	t.Parallel()
	for r := RoleWeight; int(r) < numRoles; r++ {
		m, got := SplitRole("a.b." + r.String())
		if got != r || m != "a.b" {
			t.Errorf("SplitRole(a.b.%s) = %q, %v", r, m, got)
		}
	}
	if m, r := SplitRole("x.bias"); m != "x" || r != roleParam {
		t.Errorf("x.bias: %q %v", m, r)
	}
	if m, r := SplitRole("weight"); m != "" || r != RoleWeight {
		t.Errorf("weight: %q %v", m, r)
	}
}

func TestScaleBlocks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ n, k, r, c int64 }{
		{576, 7168, 5, 56}, {96, 7168, 1, 56}, {12288, 128, 96, 1}, {128, 129, 1, 2}, {1, 1, 1, 1},
	} {
		if r, k := scaleBlocks(c.n, c.k); r != c.r || k != c.c {
			t.Errorf("ScaleBlocks(%d, %d) = %d, %d; want %d, %d", c.n, c.k, r, k, c.r, c.c)
		}
	}
}

// A --local-dir download (real files and .cache/) and a hub snapshot
// (symlinks into blobs/): the side files are the same.
func TestSideFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("config.json", "{}")
	write("tiktoken.model", "abc")
	write("model-00001-of-000002.safetensors", "x")
	write("model-00002-of-000002.safetensors", "x")
	write("stray.safetensors", "kept: not in the index")
	write("model.safetensors.index.json", "{}")
	write(".cache/huggingface/download/config.json.metadata", "m")
	write(".git/HEAD", "ref")
	write(".gitattributes", "*")
	write("assets/logo.png", "png")
	blob := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(blob, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(blob, filepath.Join(root, "README.md")); err != nil {
		t.Fatal(err)
	}
	got, err := SideFiles(root, []string{"model-00001-of-000002.safetensors", "model-00002-of-000002.safetensors"})
	if err != nil {
		t.Fatal(err)
	}
	want := []sideFile{{"README.md", 5}, {"assets/logo.png", 3}, {"config.json", 2}, {"stray.safetensors", 22}, {"tiktoken.model", 3}}
	if !slices.Equal(got, want) {
		t.Errorf("SideFiles = %v, want %v", got, want)
	}
	for rel, ok := range map[string]bool{"config.json": true, "a/b.py": true, ".cache/x": false, "a/.git/x": false,
		"model.safetensors.index.json": false, "": false} {
		if IsSideFileName(rel) != ok {
			t.Errorf("IsSideFileName(%q) = %v", rel, !ok)
		}
	}
}

// FuzzParseName: no name panics the matcher; a weight and its companions
// share a module that prefixes the name; only experts have an expert index.
func FuzzParseName(f *testing.F) {
	for _, n := range []string{
		"language_model.model.layers.1.block_sparse_moe.experts.10.w3.weight_scale",
		"model.layers.3.self_attn.o_proj.weight_scale_inv", "language_model.lm_head.weight",
		"model.layers.5.self_attn.A_log", "vision_tower.encoder.blocks.3.wqkv.weight", "model.layers.3.weight",
		"language_model.model.layers.", "model.layers.1.mlp.experts.", ".", "",
	} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, name string) {
		n := k3Classifier.ParseName(name)
		if !strings.HasPrefix(name, n.Module) || (n.Module != "" && len(name) > len(n.Module) && name[len(n.Module)] != '.') {
			t.Fatalf("%q: module %q", name, n.Module)
		}
		if (n.Expert >= 0) != (n.Group == GroupExperts) || (n.Expert >= 0 && n.Layer < 0) {
			t.Fatalf("%q: %+v", name, n)
		}
		if n.Group != groupOther && n.Group.Component() == Other {
			t.Fatalf("%q: group %v has no component", name, n.Group)
		}
		if k3Classifier.Classify(name) != n.Group.Component() {
			t.Fatalf("%q: Classify disagrees", name)
		}
	})
}
