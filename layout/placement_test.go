package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	st "github.com/k3ckpt/k3ckpt/safetensors"
)

const gib = float64(1 << 30)

var (
	k3Once            sync.Once
	k3BF16, k3FP8     []st.TensorSpec
	tinyOnce          sync.Once
	tinyBF16, tinyFP8 []st.TensorSpec
)

func k3Catalogs() ([]st.TensorSpec, []st.TensorSpec) {
	k3Once.Do(func() {
		k3BF16 = k3Dims.catalog()
		k3FP8 = fp8Converted(k3BF16, ".weight_scale_inv", false)
	})
	return k3BF16, k3FP8
}

func tinyCatalogs() ([]st.TensorSpec, []st.TensorSpec) {
	tinyOnce.Do(func() {
		tinyBF16 = tinyDims.catalog()
		tinyFP8 = fp8Converted(tinyBF16, ".weight_scale_inv", false)
	})
	return tinyBF16, tinyFP8
}

var (
	k3HeadOnce sync.Once
	k3HeadFP8  []st.TensorSpec
)

// k3HeadCatalog is the FP8 K3 catalog for checks that look at its first
// layers alone (and the model-level tensors): under -short it holds only
// the first 8 layers, whose tensors are the whole catalog's, in the same
// order; the full run takes the whole catalog.
func k3HeadCatalog() []st.TensorSpec {
	if !testing.Short() {
		_, fp := k3Catalogs()
		return fp
	}
	k3HeadOnce.Do(func() {
		d := k3Dims
		d.layers = 8
		k3HeadFP8 = fp8Converted(d.catalog(), ".weight_scale_inv", false)
	})
	return k3HeadFP8
}

// k3HeadPlan is k3Plan of the FP8 catalog, of k3HeadCatalog under -short.
func k3HeadPlan(t testing.TB, name string, o Options) *Placement {
	t.Helper()
	if !testing.Short() {
		return k3Plan(t, name, o, true)
	}
	return mustPlan(t, name, k3Model(), o, k3HeadCatalog())
}

var (
	k3PlansMu sync.Mutex
	k3Plans   = map[string]*Placement{}
)

// k3Plan is the placement of the K3 catalog (FP8 or BF16) under a built-in
// layout, made once per test binary: placing 497,220 tensors takes a
// fraction of a second, and several tests read the same placement. Callers
// must not modify it.
func k3Plan(t testing.TB, name string, o Options, fp8 bool) *Placement {
	t.Helper()
	key := fmt.Sprintf("%s %+v fp8=%v", name, o, fp8)
	k3PlansMu.Lock()
	defer k3PlansMu.Unlock()
	if p := k3Plans[key]; p != nil {
		return p
	}
	bf, fp := k3Catalogs()
	specs := bf
	if fp8 {
		specs = fp
	}
	p := mustPlan(t, name, k3Model(), o, specs)
	k3Plans[key] = p
	return p
}

func totalBytes(t testing.TB, specs []st.TensorSpec) int64 {
	var n int64
	for _, s := range specs {
		b, err := st.ByteSize(s.DType, s.Shape)
		if err != nil {
			t.Fatal(err)
		}
		n += b
	}
	return n
}

func mustPlan(t testing.TB, name string, m Model, o Options, specs []st.TensorSpec) *Placement {
	t.Helper()
	l, err := builtinLayout(name, m, o)
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Place(specs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pieces(t testing.TB, p *Placement, rank int) []piece {
	t.Helper()
	pcs, err := p.Pieces(rank)
	if err != nil {
		t.Fatal(err)
	}
	return pcs
}

func pieceMap(t testing.TB, p *Placement, rank int) map[string]piece {
	m := map[string]piece{}
	for _, pc := range pieces(t, p, rank) {
		m[pc.Name] = pc
	}
	return m
}

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.3f, want %.3f ± %.3f", what, got, want, tol)
	}
}

// The fixture itself must be K3: the released name list implies 497,220
// tensors, and audits of the release give 1453.66 GiB (BF16/MXFP4 as
// released) and 1403.79 GiB after the FP8 recipe.
func TestK3FixtureMatchesSpec(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	bf, fp := k3Catalogs()
	if len(bf) != 497220 {
		t.Errorf("catalog has %d tensors, want 497220", len(bf))
	}
	near(t, "BF16 checkpoint GiB", float64(totalBytes(t, bf))/gib, 1453.66, 0.005)
	near(t, "FP8 checkpoint GiB", float64(totalBytes(t, fp))/gib, 1403.79, 0.005)
}

func sumRule(pcs []piece, rules ...string) (n int64) {
	for _, pc := range pcs {
		for _, r := range rules {
			if pc.Rule == r {
				n += pc.Bytes
			}
		}
	}
	return n
}

func sumNames(pcs []piece, names ...string) (n int64) {
	for _, pc := range pcs {
		for _, s := range names {
			if pc.Name == s {
				n += pc.Bytes
			}
		}
	}
	return n
}

// dp16 on the FP8 checkpoint gives the audited per-rank figures: 84.2 GiB of
// experts, a 48.8 GiB weight-shard set saving 42.7 GiB when split 8 ways,
// embedding + lm_head 4.38 GiB replicated and 0.55 GiB under vocab TP8.
func TestDP16SpecFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	on := k3Plan(t, "dp16", Options{TextOnly: true, WeightShard: true, VocabTP: true}, true)
	off := k3Plan(t, "dp16", Options{TextOnly: true}, true)
	vocab := []string{"language_model.model.embed_tokens.weight", "language_model.lm_head.weight"}
	for _, r := range []int{0, 7, 8, 15} {
		pOn, pOff := pieces(t, on, r), pieces(t, off, r)
		ex := sumRule(pOn, "experts-ep")
		if ex != 92*56*17547264 {
			t.Errorf("rank %d experts = %d B, want 92×56×17,547,264", r, ex)
		}
		near(t, fmt.Sprintf("rank %d experts GiB", r), float64(ex)/gib, 84.2, 0.05)
		full := sumRule(pOff, "weight-shard")
		near(t, "weight-shard set GiB", float64(full)/gib, 48.8, 0.05)
		near(t, "weight-shard saving GiB", float64(full-sumRule(pOn, "weight-shard"))/gib, 42.7, 0.05)
		near(t, "embed+lm_head GiB (replicated)", float64(sumNames(pOff, vocab...))/gib, 4.38, 0.005)
		near(t, "embed+lm_head GiB (vocab TP8)", float64(sumNames(pOn, vocab...))/gib, 0.55, 0.005)
	}
	// routed_expert_down_proj [3584, H] split 8 ways is 448 rows: cuts a block.
	if len(on.Unaligned) != 92 || !strings.HasSuffix(on.Unaligned[0], "routed_expert_down_proj.weight") {
		t.Errorf("unaligned = %d names (%v…), want the 92 routed_expert_down_proj", len(on.Unaligned), on.Unaligned[:min(2, len(on.Unaligned))])
	}
	if len(on.Dropped) != 168 {
		t.Errorf("dropped %d tensors, want the 168 vision tensors", len(on.Dropped))
	}
}

func TestDP16RankSlices(t *testing.T) {
	t.Parallel()
	p := k3HeadPlan(t, "dp16", Options{TextOnly: true, WeightShard: true, VocabTP: true})
	for _, r := range []int{0, 5, 13} {
		pm := pieceMap(t, p, r)
		g := int64(r % 8)
		// EP16: experts [56r, 56r+56) of every MoE layer, nothing else.
		experts := map[int]bool{}
		for name, pc := range pm {
			if pc.Held == heldExpert {
				var l, e int
				var rest string
				if _, err := fmt.Sscanf(strings.ReplaceAll(name, ".", " "), "language_model model layers %d block_sparse_moe experts %d %s", &l, &e, &rest); err != nil {
					t.Fatalf("expert piece %s: %v", name, err)
				}
				experts[e] = true
			}
		}
		if len(experts) != 56 {
			t.Errorf("rank %d holds %d distinct experts", r, len(experts))
		}
		for e := 56 * r; e < 56*r+56; e++ {
			if !experts[e] {
				t.Errorf("rank %d lacks expert %d", r, e)
			}
		}
		check := func(name string, axis int, start, stop int64) {
			t.Helper()
			pc, ok := pm[name]
			if !ok {
				t.Fatalf("rank %d lacks %s", r, name)
			}
			if pc.Held != HeldSlice || pc.Axis != axis || pc.Start != start || pc.Stop != stop {
				t.Errorf("rank %d %s = %v axis %d [%d,%d), want slice axis %d [%d,%d)", r, name, pc.Held, pc.Axis, pc.Start, pc.Stop, axis, start, stop)
			}
		}
		L1 := "language_model.model.layers.1."
		check("language_model.model.embed_tokens.weight", 0, 20480*g, 20480*(g+1))
		check("language_model.lm_head.weight", 0, 20480*g, 20480*(g+1))
		check(L1+"self_attn.q_proj.weight", 0, 1536*g, 1536*(g+1))
		check(L1+"self_attn.q_proj.weight_scale_inv", 0, 12*g, 12*(g+1))
		check(L1+"self_attn.o_proj.weight", 0, 896*g, 896*(g+1))
		check(L1+"self_attn.o_proj.weight_scale_inv", 0, 7*g, 7*(g+1))
		check(L1+"self_attn.f_b_proj.weight", 0, 1536*g, 1536*(g+1))
		check("language_model.model.layers.3.self_attn.q_b_proj.weight", 0, 2304*g, 2304*(g+1))
		check(L1+"block_sparse_moe.shared_experts.down_proj.weight", 0, 896*g, 896*(g+1))
		check(L1+"block_sparse_moe.routed_expert_down_proj.weight", 0, 448*g, 448*(g+1))
		if pc := pm[L1+"block_sparse_moe.routed_expert_down_proj.weight_scale_inv"]; pc.Held != heldReplica || pc.Scale != scaleReplicated || pc.Bytes != 28*56*4 {
			t.Errorf("unaligned scale piece = %+v, want the whole [28,56] scale replicated", pc)
		}
		for _, name := range []string{L1 + "self_attn.A_log", L1 + "self_attn.b_proj.weight", "language_model.model.layers.3.self_attn.kv_b_proj.weight",
			"language_model.model.layers.0.mlp.down_proj.weight", "language_model.model.norm.weight"} {
			if pc, ok := pm[name]; !ok || pc.Held != heldReplica || pc.Bytes != byteSize(t, pc) {
				t.Errorf("rank %d %s = %+v, want replicated whole", r, name, pc)
			}
		}
		if _, ok := pm["vision_tower.encoder.blocks.0.wqkv.weight"]; ok {
			t.Errorf("rank %d holds vision", r)
		}
	}
}

func byteSize(t testing.TB, pc piece) int64 {
	n, err := st.ByteSize(pc.DType, pc.Shape)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDP2DCP8RankSlices(t *testing.T) {
	t.Parallel()
	p := k3HeadPlan(t, "dp2-dcp8", Options{TextOnly: true, VocabTP: true})
	for _, r := range []int{2, 10} {
		pm := pieceMap(t, p, r)
		g := int64(r % 8)
		check := func(name string, axis int, start, stop int64) {
			t.Helper()
			pc, ok := pm[name]
			if !ok {
				t.Fatalf("rank %d lacks %s", r, name)
			}
			if pc.Held != HeldSlice || pc.Axis != axis || pc.Start != start || pc.Stop != stop {
				t.Errorf("rank %d %s = %v axis %d [%d,%d), want slice axis %d [%d,%d)", r, name, pc.Held, pc.Axis, pc.Start, pc.Stop, axis, start, stop)
			}
		}
		K, M := "language_model.model.layers.4.self_attn.", "language_model.model.layers.7.self_attn."
		for _, n := range []string{"q_proj", "k_proj", "v_proj", "g_proj"} {
			check(K+n+".weight", 0, 1536*g, 1536*(g+1)) // 12 heads × 128
			check(K+n+".weight_scale_inv", 0, 12*g, 12*(g+1))
		}
		check(K+"f_b_proj.weight", 0, 1536*g, 1536*(g+1))
		check(K+"q_conv1d.weight", 0, 1536*g, 1536*(g+1))
		check(K+"dt_bias", 0, 1536*g, 1536*(g+1))
		check(K+"b_proj.weight", 0, 12*g, 12*(g+1))
		check(K+"A_log", 0, 12*g, 12*(g+1)) // of the first 96 of 128
		check(K+"o_proj.weight", 1, 1536*g, 1536*(g+1))
		check(K+"o_proj.weight_scale_inv", 1, 12*g, 12*(g+1))
		check(M+"o_proj.weight", 1, 1536*g, 1536*(g+1))
		check(M+"g_proj.weight", 0, 1536*g, 1536*(g+1))
		check("language_model.model.layers.0.mlp.gate_proj.weight", 0, 4224*g, 4224*(g+1))
		check("language_model.model.layers.0.mlp.down_proj.weight", 1, 4224*g, 4224*(g+1))
		check("language_model.model.layers.0.mlp.down_proj.weight_scale_inv", 1, 33*g, 33*(g+1))
		check("language_model.lm_head.weight", 0, 20480*g, 20480*(g+1))
		for _, name := range []string{M + "q_b_proj.weight", M + "q_b_proj.weight_scale_inv", M + "kv_b_proj.weight", M + "q_a_proj.weight",
			K + "f_a_proj.weight", K + "o_norm.weight", "language_model.model.layers.5.block_sparse_moe.shared_experts.down_proj.weight",
			"language_model.model.layers.5.block_sparse_moe.routed_expert_up_proj.weight", "language_model.model.layers.5.block_sparse_moe.gate.weight"} {
			if pc, ok := pm[name]; !ok || pc.Held != heldReplica || pc.Bytes != byteSize(t, pc) {
				t.Errorf("rank %d %s = %+v, want replicated whole", r, name, pc)
			}
		}
	}
}

func TestPP16Stages(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	bf, _ := k3Catalogs()
	p := k3Plan(t, "pp16", Options{}, false)
	if got := p.Layout.Partition; !reflect.DeepEqual(got, pp16Partition()) {
		t.Fatalf("partition %v", got)
	}
	// Seed: s1 holds layers 7–11, s7 holds 43–47, the last stage 3 layers.
	for s, want := range map[int][2]int{0: {0, 7}, 1: {7, 12}, 7: {43, 48}, 8: {48, 55}, 15: {90, 93}} {
		if a, b := p.Layout.StageLayers(s); a != want[0] || b != want[1] {
			t.Errorf("stage %d layers [%d,%d), want %v", s, a, b, want)
		}
	}
	// The released placement: layer l lives in shard l+1; model-level tensors and vision in 94–96.
	fileOf := map[string]string{}
	shard := func(i int) string { return fmt.Sprintf("model-%05d-of-000096.safetensors", i) }
	for _, s := range bf {
		switch {
		case strings.HasPrefix(s.Name, "language_model.model.layers."):
			n, _, _ := strings.Cut(strings.TrimPrefix(s.Name, "language_model.model.layers."), ".")
			l, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("%s: no layer number", s.Name)
			}
			fileOf[s.Name] = shard(l + 1)
		case strings.HasPrefix(s.Name, "vision_tower.") || strings.HasPrefix(s.Name, "mm_projector."):
			fileOf[s.Name] = shard(96)
		case strings.Contains(s.Name, "embed_tokens"):
			fileOf[s.Name] = shard(94)
		default:
			fileOf[s.Name] = shard(95)
		}
	}
	var total int64
	for s := 0; s < 16; s++ {
		a, b := p.Layout.StageLayers(s)
		var want []string
		for l := a; l < b; l++ {
			want = append(want, shard(l+1))
		}
		if s == 0 {
			want = append(want, shard(94), shard(96))
		}
		if s == 15 {
			want = append(want, shard(95))
		}
		got, err := p.files(s, fileOf)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("stage %d opens %v, want %v", s, got, want)
		}
		var hasEmbed, hasHead, hasNorm, hasVision bool
		for _, pc := range pieces(t, p, s) {
			switch pc.Name {
			case "language_model.model.embed_tokens.weight":
				hasEmbed = true
			case "language_model.lm_head.weight":
				hasHead = true
			case "language_model.model.output_attn_res_proj.weight":
				hasNorm = true
			case "mm_projector.proj.0.weight":
				hasVision = true
			}
		}
		if hasEmbed != (s == 0) || hasVision != (s == 0) || hasHead != (s == 15) || hasNorm != (s == 15) {
			t.Errorf("stage %d: embed %v vision %v lm_head %v output_attn_res %v", s, hasEmbed, hasVision, hasHead, hasNorm)
		}
		total += p.RankBytes[s]
	}
	if total != totalBytes(t, bf) {
		t.Errorf("stages hold %d B in all, checkpoint has %d", total, totalBytes(t, bf))
	}
	// text-only drops vision from stage 0.
	q := k3Plan(t, "pp16", Options{TextOnly: true}, false)
	if q.RankBytes[0] >= p.RankBytes[0] || len(q.Dropped) != 168 {
		t.Errorf("text-only stage 0 = %d B (with vision %d), dropped %d", q.RankBytes[0], p.RankBytes[0], len(q.Dropped))
	}
}

func TestPartitions(t *testing.T) {
	t.Parallel()
	// SGLang's get_pp_indices without SGLANG_PP_LAYER_PARTITION: 93 over 16 is
	// base 5 with the last 13 stages getting one more.
	even, err := defaultPartition(93, 16)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6}; !reflect.DeepEqual(even, want) {
		t.Errorf("default split %v, want %v", even, want)
	}
	l, err := builtinLayout("pp16", k3Model(), Options{EvenPartition: true})
	if err != nil || !reflect.DeepEqual(l.Partition, even) {
		t.Errorf("pp16 even partition %v %v", l, err)
	}
	l, err = builtinLayout("pp8-tp8", k3Model(), Options{})
	if err != nil || !reflect.DeepEqual(l.Partition, []int{12, 12, 12, 12, 12, 12, 12, 9}) || l.ranks() != 64 {
		t.Errorf("pp8-tp8 partition %v %v", l, err)
	}
	for _, c := range []struct {
		p    []int
		want string
	}{
		{[]int{7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 9}, "len(partitions)=15 does not match pp_size=16"},
		{[]int{7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 6, 4}, "sum(partitions)=94 does not match num_hidden_layers=93"},
		{[]int{7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 9, 0}, "partition entry 15 (stage 15) is 0"},
		{[]int{7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 10, -1}, "is -1"},
	} {
		_, err := builtinLayout("pp16", k3Model(), Options{PPPartition: c.p})
		if !errors.Is(err, errPartition) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("partition %v: err %v, want %q", c.p, err, c.want)
		}
	}
	if _, err := ParsePartition("7,5,x"); !errors.Is(err, errPartition) || !strings.Contains(err.Error(), "invalid partition string") {
		t.Errorf("parse err %v", err)
	}
	if p, err := ParsePartition("7, 5,3"); err != nil || !reflect.DeepEqual(p, []int{7, 5, 3}) {
		t.Errorf("parse %v %v", p, err)
	}
}

func TestPP8TP8Experts(t *testing.T) {
	t.Parallel()
	_, fp := tinyCatalogs()
	p := mustPlan(t, "pp8-tp8", tinyDims.model(), Options{}, fp)
	// rank 8*1+3: stage 1 (layers 12–23), TP rank 3.
	pm := pieceMap(t, p, 11)
	E := "language_model.model.layers.13.block_sparse_moe.experts.31."
	for name, want := range map[string][3]int64{
		E + "w1.weight_packed": {0, 32 * 3, 32 * 4}, E + "w1.weight_scale": {0, 96, 128},
		E + "w2.weight_packed": {1, 16 * 3, 16 * 4}, E + "w2.weight_scale": {1, 3, 4},
	} {
		pc := pm[name]
		if pc.Held != HeldSlice || int64(pc.Axis) != want[0] || pc.Start != want[1] || pc.Stop != want[2] {
			t.Errorf("%s = %+v, want axis %d [%d,%d)", name, pc, want[0], want[1], want[2])
		}
	}
	if _, ok := pm["language_model.model.layers.11.input_layernorm.weight"]; ok {
		t.Error("stage 1 holds layer 11")
	}
	if _, ok := pm["language_model.model.layers.12.input_layernorm.weight"]; !ok {
		t.Error("stage 1 lacks layer 12")
	}
}

// Every layout must cover each kept tensor exactly: the slices of a group tile
// the (valid part of the) axis, replicas are whole on every rank of the stage,
// experts sit on exactly one rank.
func TestPlansTileTensors(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	_, fp := tinyCatalogs()
	for _, name := range Names() {
		for _, o := range []Options{{}, {TextOnly: true, WeightShard: true, VocabTP: true}} {
			p := mustPlan(t, name, tinyDims.model(), o, fp)
			type cover struct {
				ranks   int
				axis    int
				scaleOf string
				scale   scaleMode
				slices  map[[2]int64]int
			}
			seen := make([]cover, len(fp))
			for r := 0; r < p.ranks(); r++ {
				for _, pc := range pieces(t, p, r) {
					c := &seen[pc.Index]
					c.ranks++
					if pc.Held == HeldSlice {
						if c.slices == nil {
							c.slices = map[[2]int64]int{}
						}
						c.slices[[2]int64{pc.Start, pc.Stop}]++
						c.axis, c.scaleOf, c.scale = pc.Axis, pc.ScaleOf, pc.Scale
					} else if pc.Bytes != byteSize(t, pc) {
						t.Fatalf("%s: whole piece %s has %d B", name, pc.Name, pc.Bytes)
					}
				}
			}
			dropped := map[int]bool{}
			for _, i := range p.Dropped {
				dropped[i] = true
			}
			R := p.Layout.RanksPerStage
			for i, s := range fp {
				c := seen[i]
				switch {
				case dropped[i]:
					if c.ranks != 0 {
						t.Errorf("%s: dropped %s on %d ranks", name, s.Name, c.ranks)
					}
				case strings.Contains(s.Name, ".experts.") && name != "pp8-tp8":
					if c.ranks != 1 {
						t.Errorf("%s: expert tensor %s on %d ranks", name, s.Name, c.ranks)
					}
				case c.slices == nil:
					if c.ranks != R {
						t.Errorf("%s: %s on %d ranks, want %d", name, s.Name, c.ranks, R)
					}
				default:
					var ks [][2]int64
					for k, n := range c.slices {
						if n != R/len(c.slices) {
							t.Errorf("%s: %s slice %v on %d ranks", name, s.Name, k, n)
						}
						ks = append(ks, k)
					}
					sort.Slice(ks, func(a, b int) bool { return ks[a][0] < ks[b][0] })
					for j := 1; j < len(ks); j++ {
						if ks[j][0] != ks[j-1][1] {
							t.Errorf("%s: %s slices %v do not tile", name, s.Name, ks)
						}
					}
					end := s.Shape[c.axis]
					if strings.HasSuffix(s.Name, "A_log") {
						end = tinyDims.linHeads
					} else if c.scaleOf != "" && c.scale == scaleFollow {
						end = s.Shape[c.axis]
					}
					if ks[0][0] != 0 || ks[len(ks)-1][1] != end {
						t.Errorf("%s: %s slices %v do not cover [0,%d)", name, s.Name, ks, end)
					}
				}
			}
		}
	}
}

func TestBadLayouts(t *testing.T) {
	t.Parallel()
	_, fp := tinyCatalogs()
	if _, err := builtinLayout("dp32", k3Model(), Options{}); !errors.Is(err, errUnknownLayout) || !strings.Contains(err.Error(), "dp2-dcp8") {
		t.Errorf("unknown layout err %v", err)
	}
	if _, err := Resolve("nope", k3Model(), Options{}); !errors.Is(err, errUnknownLayout) {
		t.Errorf("resolve err %v", err)
	}
	// Heads not divisible by the group.
	m := tinyDims.model()
	m.LinearHeads = 12
	if _, err := builtinLayout("dp2-dcp8", m, Options{}); !errors.Is(err, errIndivisible) || !strings.Contains(err.Error(), "12 heads not divisible by 8") {
		t.Errorf("heads err %v", err)
	}
	// Vocab not divisible by 8.
	d := tinyDims
	d.vocab = 1020
	l := must(builtinLayout("dp16", d.model(), Options{VocabTP: true}))(t)
	if _, err := l.Place(d.catalog()); !errors.Is(err, errIndivisible) || !strings.Contains(err.Error(), "embed_tokens.weight: axis 0 of [1020 256] has 1020 entries, not divisible by 8") {
		t.Errorf("vocab err %v", err)
	}
	// A layout file that leaves tensors unmatched and matches some twice.
	l = must(builtinLayout("dp16", tinyDims.model(), Options{}))(t)
	l.Rules = l.Rules[1:] // no expert rule
	l.Rules = append(l.Rules, rule{Name: "norms-again", Match: []string{"language_model.model.norm.weight"}})
	b := must(l.jsonText())(t)
	path := filepath.Join(t.TempDir(), "bad.json")
	check(t, os.WriteFile(path, b, 0o644))
	bad, err := loadLayout(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Place(fp)
	if !errors.Is(err, errUnmatched) || !errors.Is(err, errAmbiguous) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{"92 layers × 32 experts × 6", "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_packed",
		"and 17644 more", `language_model.model.norm.weight (rules "replicated", "norms-again")`} {
		if want == "92 layers × 32 experts × 6" {
			want = fmt.Sprintf("%d tensors", 92*32*6)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	// Unknown JSON fields and enum names are rejected.
	if _, err := parseLayout([]byte(`{"name":"x","ranks_per_stage":1,"rules":[{"name":"a","match":["**"],"action":"copy"}]}`)); !errors.Is(err, errLayout) || !strings.Contains(err.Error(), `unknown action "copy"`) {
		t.Errorf("enum err %v", err)
	}
	if _, err := parseLayout([]byte(`{"name":"x","ranks_per_stage":1,"rulez":[]}`)); !errors.Is(err, errLayout) {
		t.Errorf("field err %v", err)
	}
	// A value no name stands for, as a Go caller can set it, is refused.
	for _, set := range []func(r *rule){
		func(r *rule) { r.Action = drop + 1 },
		func(r *rule) { r.Stage = stageLast + 1 },
		func(r *rule) { r.UnalignedScale = scaleReject + 1 },
	} {
		l = must(builtinLayout("dp16", tinyDims.model(), Options{}))(t)
		set(&l.Rules[0])
		if _, err := l.Place(fp); !errors.Is(err, errLayout) || !strings.Contains(err.Error(), "unknown") || !strings.Contains(err.Error(), "value") {
			t.Errorf("out-of-range enum: %v", err)
		}
	}
	// A pipeline rule without <layer> must say first or last.
	if _, err := parseLayout([]byte(`{"name":"x","layers":2,"partition":[1,1],"ranks_per_stage":1,"rules":[{"name":"a","match":["**"],"action":"replicate"}]}`)); !errors.Is(err, errLayout) || !strings.Contains(err.Error(), `"first" or "last"`) {
		t.Errorf("stage err %v", err)
	}
	// Pieces of a rank out of range.
	p := mustPlan(t, "dp16", tinyDims.model(), Options{}, fp)
	if _, err := p.Pieces(16); !errors.Is(err, errRank) {
		t.Errorf("rank err %v", err)
	}
	// Expert index beyond the count.
	m = tinyDims.model()
	m.Experts = 16
	l = must(builtinLayout("dp16", m, Options{}))(t)
	if _, err := l.Place(fp); !errors.Is(err, errExpert) {
		t.Errorf("expert err %v", err)
	}
	// Reject policy for a split cutting a scale block.
	l = must(builtinLayout("dp16", k3Model(), Options{WeightShard: true}))(t)
	l.Rules[1].UnalignedScale = scaleReject
	if _, err := l.Place(k3HeadCatalog()[:20000]); !errors.Is(err, errScaleAlign) || !strings.Contains(err.Error(), "routed_expert_down_proj.weight into 448-entry slices") {
		t.Errorf("scale align err %v", err)
	}
}

// A layout survives a JSON round trip and plans identically.
func TestLayoutJSONRoundTrip(t *testing.T) {
	t.Parallel()
	_, fp := tinyCatalogs()
	for _, name := range Names() {
		o := must(DefaultOptions(name))(t)
		l, err := builtinLayout(name, tinyDims.model(), o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := l.jsonText()
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		l2, err := parseLayout(b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		p1 := must(l.Place(fp))(t)
		p2, err := l2.Place(fp)
		if err != nil || !reflect.DeepEqual(p1.RankBytes, p2.RankBytes) {
			t.Errorf("%s: round trip changes the plan: %v", name, err)
		}
	}
}

func TestPatterns(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pat, name string
		ok        bool
		layer     int
	}{
		{"a.<layer>.{q,k}_proj.weight", "a.12.k_proj.weight", true, 1},
		{"a.<layer>.{q,k}_proj.weight", "a.12.v_proj.weight", false, -1},
		{"a.<layer>.x", "a.b.x", false, -1},
		{"vision_tower.**", "vision_tower.encoder.blocks.3.wo.weight", true, -1},
		{"vision_tower.**", "vision_towers.x", false, -1},
		{"a.**.b", "a.b", true, -1},
		{"a.**.b", "a.x.y.b", true, -1},
		{"a.*_proj.#", "a.q_b_proj.3", true, -1},
		{"a.*_proj.#", "a.q_b_proj.x", false, -1},
	} {
		p, err := compilePattern(c.pat)
		if err != nil {
			t.Fatal(err)
		}
		caps, ok := p.match(strings.Split(c.name, "."))
		if ok != c.ok || (ok && caps.layer != c.layer) {
			t.Errorf("%q vs %q: %v %+v", c.pat, c.name, ok, caps)
		}
	}
	for _, bad := range []string{"", "a..b", "a.{q,k.b", "a.<layer>.<layer>", "a.[.b"} {
		if _, err := compilePattern(bad); !errors.Is(err, errPattern) {
			t.Errorf("pattern %q: err %v", bad, err)
		}
	}
	var ns nameShape
	ns.scan("a.12.b.3.x1")
	if k := string(ns.key); k != "a.#.b.#.x1" || ns.ints[1] != 12 || ns.ints[3] != 3 || ns.ints[0] != -1 || ns.ints[4] != -1 {
		t.Errorf("key %q ints %v", k, ns.ints[:5])
	}
}

// Full-size planning: placing 497,220 tensors should take well under 100 ms.
func BenchmarkPlanDP16K3(b *testing.B) {
	_, fp := k3Catalogs()
	l, err := builtinLayout("dp16", k3Model(), Options{TextOnly: true, WeightShard: true, VocabTP: true})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Place(fp); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlanPP16K3(b *testing.B) {
	bf, _ := k3Catalogs()
	l, err := builtinLayout("pp16", k3Model(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Place(bf); err != nil {
			b.Fatal(err)
		}
	}
}

// A split of a sub-byte dtype must move whole bytes per step along the axis
// (the exporter copies slices step by step), not only per slice: F4 [4, 3]
// split 2 ways along axis 0 gives slices of 3 whole bytes but steps of 1.5
// bytes, and is refused; F4 [4, 6] is fine.
func TestSplitSubByteRows(t *testing.T) {
	t.Parallel()
	l, err := parseLayout([]byte(`{"name":"x","ranks_per_stage":2,"rules":[{"name":"s","match":["**"],"action":"split","axis":0,"parts":2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Place([]st.TensorSpec{{Name: "w", DType: st.F4, Shape: []int64{4, 6}}}); err != nil {
		t.Errorf("whole-byte rows: %v", err)
	}
	if _, err := l.Place([]st.TensorSpec{{Name: "w", DType: st.F4, Shape: []int64{4, 3}}}); !errors.Is(err, errIndivisible) {
		t.Errorf("1.5-byte rows: %v", err)
	}
}

// files lists the source files a rank has to open, given each tensor's file
// (a checkpoint index's weight_map).
func (p *Placement) files(rank int, fileOf map[string]string) ([]string, error) {
	pcs, err := p.Pieces(rank)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, pc := range pcs {
		f, ok := fileOf[pc.Name]
		if !ok {
			return nil, fmt.Errorf("%w: tensor %s has no file", errManifest, pc.Name)
		}
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out, nil
}

// PlacementFiles is files for the external tests.
var PlacementFiles = (*Placement).files
