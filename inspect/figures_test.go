package inspect

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
)

// Size figures of the released checkpoint from independent audits of it (not
// from this code), the reference of these tests. Exact byte counts come from
// the released tensor shapes by hand arithmetic; GiB figures are compared at
// the precision the audits quote them.
const (
	hidden      = 7168
	vocab       = 163840
	expertBytes = 17_547_264 // one routed expert: w1, w2, w3 packed + scales
	moeLayers   = 92
	numExperts  = 896
	ep          = 16

	routedExpertBytes     = moeLayers * numExperts * expertBytes // 1347.12 GiB
	routedExpertsPerRank  = routedExpertBytes / ep               // 84.2 GiB under EP16
	embedOrHeadBytes      = vocab * hidden * 2                   // one BF16 [163840, 7168]
	embedHeadPerRankVocab = 2 * (vocab / 8) * hidden * 2         // 20480 rows each under vocab TP8
	fullTensorCount       = 497_220
	fullFiles             = 96
)

// gib2 and gib1 format bytes as the spec quotes GiB.
func gib2(b int64) string { return fmt.Sprintf("%.2f", float64(b)/giB) }
func gib1(b int64) string { return fmt.Sprintf("%.1f", float64(b)/giB) }

func rowBytes(rows []row, keys ...string) int64 {
	var n int64
	for _, r := range rows {
		if slices.Contains(keys, r.Key) {
			n += r.Bytes
		}
	}
	return n
}

// nonExpertText is the non-expert text weights: everything but the routed
// experts and the vision stack.
func nonExpertText(rows []row) int64 {
	var n int64
	for _, r := range rows {
		if r.Key != model.RoutedExperts.String() && r.Key != "vision" {
			n += r.Bytes
		}
	}
	return n
}

func check(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

func TestFullReplicaFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	fk := fullFake(t)
	rep := auditFake(t, fk, Options{})
	if rep.TensorCount != fullTensorCount || len(rep.Files) != fullFiles {
		t.Fatalf("%d tensors in %d files, want %d in %d", rep.TensorCount, len(rep.Files), fullTensorCount, fullFiles)
	}
	check(t, "whole checkpoint GiB", gib2(rep.TotalBytes), "1453.66")
	c := rep.Components
	if got := rowBytes(c, "routed_experts"); got != routedExpertBytes {
		t.Errorf("routed experts %d B, want 92 × 896 × 17,547,264 = %d", got, int64(routedExpertBytes))
	}
	check(t, "routed experts GiB", gib2(rowBytes(c, "routed_experts")), "1347.12")
	check(t, "non-expert text GiB", gib1(nonExpertText(c)), "105.7")
	check(t, "non-expert text GB", fmt.Sprintf("%.1f", float64(nonExpertText(c))/1e9), "113.5")
	check(t, "attention GiB", gib1(rowBytes(c, "attention.kda", "attention.mla")), "67.4")
	check(t, "shared experts GiB", gib1(rowBytes(c, "shared_experts")), "22.6")
	check(t, "latent GiB", gib1(rowBytes(c, "latent")), "8.8")
	if got := rowBytes(c, "embedding", "lm_head"); got != 2*embedOrHeadBytes {
		t.Errorf("embedding + lm_head %d B, want %d", got, 2*embedOrHeadBytes)
	}
	check(t, "embedding + lm_head GiB", gib2(rowBytes(c, "embedding", "lm_head")), "4.38")
	check(t, "dense L0 GiB", gib2(rowBytes(c, "dense_mlp")), "1.35")
	check(t, "router GiB", gib2(rowBytes(c, "router")), "1.10")
	// vision tower 802 MB + projector 92 MB (decimal MB, rounded in the seed)
	if mb := float64(rowBytes(c, "vision")) / 1e6; mb < 893.5 || mb > 895.5 {
		t.Errorf("vision %.2f MB, want 802 + 92 ≈ 894 MB", mb)
	}
	if rowBytes(c, "other") != 0 {
		t.Errorf("unclassified tensors in the K3 replica: %v", c)
	}
	var sum tally
	for _, r := range c {
		sum.merge(r.tally)
	}
	if sum.Tensors != rep.TensorCount || sum.Bytes != rep.TotalBytes {
		t.Errorf("components sum to %+v, totals %d/%d", sum, rep.TensorCount, rep.TotalBytes)
	}
	// Header-only: bytes read are the headers (about 76 MB), the index and config.json.
	var headers int64
	for _, f := range rep.Files {
		headers += f.HeaderBytes
	}
	if headers < 70e6 || headers > 82e6 {
		t.Errorf("headers are %d bytes, want about 76 MB", headers)
	}
	idx, cfg := fk.Index, fk.ConfigJSON
	if want := headers + int64(len(idx)) + int64(len(cfg)); rep.BytesRead != want {
		t.Errorf("read %d bytes, want headers %d + index %d + config %d = %d", rep.BytesRead, headers, len(idx), len(cfg), want)
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("warnings on a faithful replica: %v", rep.Warnings)
	}
	if len(rep.Quantization) != 1 || !slices.Contains(rep.Quantization[0].Summary, `quant_method: "compressed-tensors"`) {
		t.Errorf("source quantization_config not shown: %+v", rep.Quantization)
	}
}

func TestFullReplicaRecipe(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	rep := auditFake(t, fullFake(t), Options{Recipe: defaultRecipe})
	check(t, "before GiB", gib2(rep.TotalBytes), "1453.66")
	check(t, "after GiB", gib2(rep.Recipe.TotalBytes), "1403.79")
	check(t, "non-expert after GiB", gib1(nonExpertText(rep.Recipe.Components)), "55.8")
	if got := rowBytes(rep.Recipe.Components, "routed_experts"); got != routedExpertBytes {
		t.Errorf("the recipe changed the routed experts: %d B", got)
	}
	// The recipe converts 5 weights per KDA layer (q, k, v, g, o), 6 per MLA
	// layer (q_a, q_b, kv_a, kv_b, o, g), 5 per MoE layer (shared gate, up,
	// down; routed_expert_down, routed_expert_up) and layer 0's 3 dense MLP
	// weights: 5 × 69 + 6 × 24 + 5 × 92 + 3 = 952, each gaining one scale.
	const converted = 5*69 + 6*24 + 5*92 + 3
	if rep.Recipe.TensorCount != fullTensorCount+converted {
		t.Errorf("%d tensors after, want %d", rep.Recipe.TensorCount, fullTensorCount+converted)
	}
	for _, d := range rep.Recipe.DTypes {
		if d.DType == "F8_E4M3" && d.Tensors != converted {
			t.Errorf("%d F8_E4M3 tensors, want %d", d.Tensors, converted)
		}
	}
}

// TestFullReplicaDP16 reproduces the seed's DP16 per-rank memory story.
func TestFullReplicaDP16(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	rep := auditFake(t, fullFake(t), Options{Recipe: defaultRecipe, Layout: "dp16", Steps: true, By: byRank})
	lr := rep.Layout
	if len(lr.Ranks) != ep || len(rep.Groups) != ep {
		t.Fatalf("%d ranks, want %d", len(lr.Ranks), ep)
	}
	for _, r := range lr.Ranks {
		if got := rowBytes(r.Components, "routed_experts"); got != routedExpertsPerRank {
			t.Errorf("rank %d holds %d B of experts, want %d", r.Rank, got, int64(routedExpertsPerRank))
		}
		if got := rowBytes(r.Components, "embedding", "lm_head"); got != embedHeadPerRankVocab {
			t.Errorf("rank %d holds %d B of embedding + lm_head, want %d", r.Rank, got, int64(embedHeadPerRankVocab))
		}
		if rowBytes(r.Components, "vision") != 0 {
			t.Errorf("rank %d holds vision under text-only dp16", r.Rank)
		}
	}
	check(t, "experts per rank GiB", gib1(routedExpertsPerRank), "84.2")
	steps := map[string]step{}
	var labels []string
	for _, s := range lr.Steps {
		steps[s.Label] = s
		labels = append(labels, s.Label)
	}
	if want := []string{"BF16 baseline", "text only", "FP8", "weight shard", "vocab TP8"}; !slices.Equal(labels, want) {
		t.Fatalf("steps %v, want %v", labels, want)
	}
	base, text, fp8, ws, vtp := steps["BF16 baseline"], steps["text only"], steps["FP8"], steps["weight shard"], steps["vocab TP8"]
	check(t, "non-expert per rank, BF16", gib1(nonExpertText(text.Components)), "105.7")
	check(t, "non-expert per rank, FP8", gib1(nonExpertText(fp8.Components)), "55.8")
	check(t, "weight-shard set GiB", gib1(ws.Sliced), "48.8")
	check(t, "weight-shard saving per rank GiB", gib1(fp8.Total-ws.Total), "42.7")
	check(t, "embed + lm_head per rank before vocab TP", gib2(rowBytes(ws.Components, "embedding", "lm_head")), "4.38")
	check(t, "embed + lm_head per rank under vocab TP8", gib2(rowBytes(vtp.Components, "embedding", "lm_head")), "0.55")
	check(t, "vocab TP8 saving", gib2(ws.Total-vtp.Total), "3.83")
	// Text only (an engine's ONLY_LANGUAGE) saves ≈0.83 GiB per rank: the
	// vision tower and projector.
	check(t, "text-only saving", gib2(base.Total-text.Total), "0.83")
	// The last step is the layout's defaults on the FP8 output, as the --recipe --layout report.
	if vtp.Total != lr.Ranks[0].Bytes {
		t.Errorf("last step %d B, dp16 report %d B", vtp.Total, lr.Ranks[0].Bytes)
	}
	for _, s := range lr.Steps {
		if got := rowBytes(s.Components, "routed_experts"); got != routedExpertsPerRank {
			t.Errorf("step %s: experts %d B per rank", s.Label, got)
		}
	}
}

// layerOfName parses "layers.N." for the test's own expectation.
func layerOfName(name string) (int, bool) {
	i := strings.Index(name, "layers.")
	if i < 0 {
		return 0, false
	}
	rest := name[i+len("layers."):]
	j := strings.IndexByte(rest, '.')
	if j < 0 {
		return 0, false
	}
	l, err := strconv.Atoi(rest[:j])
	return l, err == nil
}

func TestFullReplicaPP16(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	fk := fullFake(t)
	rep := auditFake(t, fk, Options{By: byStage})
	lr := rep.Layout
	part := []int{7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 6, 3} // the PP16 prefill partition (SGLANG_PP_LAYER_PARTITION)
	if lr.Name != "pp16" || len(lr.Stages) != len(part) {
		t.Fatalf("layout %s with %d stages", lr.Name, len(lr.Stages))
	}
	// Expected from the partition and the file holding each tensor (what the
	// index says: TestFakeIsTheReplica checks the fake's index is synth's) and the
	// tensor names alone: layer tensors go with their layer's stage,
	// embedding and vision to stage 0, final norms, output_attn_res_* and
	// lm_head to the last stage.
	stageOfLayer := map[int]int{}
	first := 0
	for s, n := range part {
		for l := first; l < first+n; l++ {
			stageOfLayer[l] = s
		}
		first += n
	}
	wantBytes := make([]int64, len(part))
	wantFiles := make([]map[string]bool, len(part))
	for s := range wantFiles {
		wantFiles[s] = map[string]bool{}
	}
	for _, f := range fk.Files {
		for _, tn := range f.Tensors {
			s := len(part) - 1
			if l, ok := layerOfName(tn.Name); ok {
				s = stageOfLayer[l]
			} else if strings.Contains(tn.Name, "embed_tokens") || strings.HasPrefix(tn.Name, "vision_tower.") || strings.HasPrefix(tn.Name, "mm_projector.") {
				s = 0
			}
			wantBytes[s] += tn.Size()
			wantFiles[s][f.Path] = true
		}
	}
	var total int64
	for s, st := range lr.Stages {
		a := 0
		for _, n := range part[:s] {
			a += n
		}
		if st.Layers != [2]int{a, a + part[s]} {
			t.Errorf("stage %d layers %v, want [%d, %d)", s, st.Layers, a, a+part[s])
		}
		if st.Bytes != wantBytes[s] {
			t.Errorf("stage %d: %d B, want %d", s, st.Bytes, wantBytes[s])
		}
		want := make([]string, 0, len(wantFiles[s]))
		for f := range wantFiles[s] {
			want = append(want, f)
		}
		slices.Sort(want)
		if !slices.Equal(st.Files, want) {
			t.Errorf("stage %d opens %v, want %v", s, st.Files, want)
		}
		if rep.Groups[s].Bytes != st.Bytes {
			t.Errorf("--by stage row %d: %d B, stage table %d", s, rep.Groups[s].Bytes, st.Bytes)
		}
		total += st.Bytes
	}
	if total != rep.TotalBytes || lr.DroppedBytes != 0 {
		t.Errorf("stages hold %d B (dropped %d), checkpoint %d", total, lr.DroppedBytes, rep.TotalBytes)
	}
	// Stage 7 (layers 43–47) opens exactly its five layer shards (files 44–48).
	if got := lr.Stages[7].Files; len(got) != 5 || got[0] != "model-00044-of-000096.safetensors" || got[4] != "model-00048-of-000096.safetensors" {
		t.Errorf("stage 7 files %v", got)
	}
}

// TestFullReplicaOnDisk is the end-to-end check of the figures above: the
// full-size replica synthesized to disk and inspected through its path (the
// streamed headers) gives the in-memory fake's reports, byte for byte, with
// and without a plan.
func TestFullReplicaOnDisk(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end on an on-disk replica: skipped under -short")
	}
	dir := fullReplica(t)
	fk := fullFake(t)
	for _, o := range []Options{{}, {By: byStage}, {By: byLayer, Recipe: defaultRecipe}} {
		got, err := Inspect(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		want := auditFake(t, fk, o)
		got.Source = want.Source
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Errorf("%+v: the replica on disk and the fake disagree:\n disk %.600s\n fake %.600s", o, gj, wj)
		}
	}
}
