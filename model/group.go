package model

import (
	"fmt"
	"strings"
)

// Group is a named set of K3 tensors that recipes and layouts address as one
// (a projection kind, a norm kind, the routed experts…). Every tensor of a K3
// checkpoint belongs to exactly one group; its companions (scales, packed
// codes) belong to their weight's group. Groups are finer than Components:
// each group belongs to one Component.
type Group uint8

// The groups. Their String forms are stable: recipes and layouts name groups
// in data.
const (
	// GroupOther holds tensors the schema does not know.
	GroupOther Group = iota

	// KDA (linear attention) layers, self_attn.*.
	GroupKDAQ      // kda.q_proj
	GroupKDAK      // kda.k_proj
	GroupKDAV      // kda.v_proj
	GroupKDAG      // kda.g_proj: the full-rank output gate
	GroupKDAO      // kda.o_proj
	GroupKDAFA     // kda.f_a_proj
	GroupKDAFB     // kda.f_b_proj
	GroupKDAB      // kda.b_proj
	GroupKDAConv   // kda.conv1d: q_conv1d, k_conv1d, v_conv1d
	GroupKDADTBias // kda.dt_bias: one value per head channel
	GroupKDAALog   // kda.A_log: one value per head, zero padded to ALogAlign
	GroupKDAONorm  // kda.o_norm

	// MLA (full attention) layers, self_attn.*.
	GroupMLAQA      // mla.q_a_proj
	GroupMLAQANorm  // mla.q_a_layernorm
	GroupMLAQB      // mla.q_b_proj
	GroupMLAKVA     // mla.kv_a_proj_with_mqa
	GroupMLAKVANorm // mla.kv_a_layernorm
	GroupMLAKVB     // mla.kv_b_proj
	GroupMLAO       // mla.o_proj
	GroupMLAG       // mla.g_proj: the output gate (mla_use_output_gate)

	// The dense MLP of the first_k_dense_replace layers, mlp.*.
	GroupDenseGate // dense_mlp.gate_proj
	GroupDenseUp   // dense_mlp.up_proj
	GroupDenseDown // dense_mlp.down_proj

	// MoE layers, block_sparse_moe.*.
	GroupRouterGate // router.gate: gate.weight
	GroupRouterBias // router.e_score_correction_bias
	GroupLatentDown // latent.down_proj: routed_expert_down_proj (hidden → latent)
	GroupLatentUp   // latent.up_proj: routed_expert_up_proj (latent → hidden)
	GroupLatentNorm // latent.norm: routed_expert_norm
	GroupSharedGate // shared_experts.gate_proj
	GroupSharedUp   // shared_experts.up_proj
	GroupSharedDown // shared_experts.down_proj
	GroupExperts    // experts: the routed experts (w1 gate, w2 down, w3 up)

	// Per-layer norms.
	GroupLayerNorms // layer_norms: input_layernorm, post_attention_layernorm
	GroupAttnRes    // attn_res: self_attention_res_norm/proj, mlp_res_norm/proj

	// Model level.
	GroupEmbedding   // embedding: embed_tokens
	GroupLMHead      // lm_head
	GroupFinalNorms  // final_norms: norm, output_attn_res_norm, output_attn_res_proj
	GroupVisionTower // vision_tower: every vision_tower.* tensor
	GroupMMProjector // mm_projector: every mm_projector.* tensor

	// NumGroups is the number of groups, for arrays indexed by Group.
	NumGroups = int(GroupMMProjector) + 1
)

var groupInfo = [NumGroups]struct {
	name string
	comp Component
}{
	GroupOther:       {"other", Other},
	GroupKDAQ:        {"kda.q_proj", AttentionKDA},
	GroupKDAK:        {"kda.k_proj", AttentionKDA},
	GroupKDAV:        {"kda.v_proj", AttentionKDA},
	GroupKDAG:        {"kda.g_proj", AttentionKDA},
	GroupKDAO:        {"kda.o_proj", AttentionKDA},
	GroupKDAFA:       {"kda.f_a_proj", AttentionKDA},
	GroupKDAFB:       {"kda.f_b_proj", AttentionKDA},
	GroupKDAB:        {"kda.b_proj", AttentionKDA},
	GroupKDAConv:     {"kda.conv1d", AttentionKDA},
	GroupKDADTBias:   {"kda.dt_bias", AttentionKDA},
	GroupKDAALog:     {"kda.A_log", AttentionKDA},
	GroupKDAONorm:    {"kda.o_norm", AttentionKDA},
	GroupMLAQA:       {"mla.q_a_proj", AttentionMLA},
	GroupMLAQANorm:   {"mla.q_a_layernorm", AttentionMLA},
	GroupMLAQB:       {"mla.q_b_proj", AttentionMLA},
	GroupMLAKVA:      {"mla.kv_a_proj_with_mqa", AttentionMLA},
	GroupMLAKVANorm:  {"mla.kv_a_layernorm", AttentionMLA},
	GroupMLAKVB:      {"mla.kv_b_proj", AttentionMLA},
	GroupMLAO:        {"mla.o_proj", AttentionMLA},
	GroupMLAG:        {"mla.g_proj", AttentionMLA},
	GroupDenseGate:   {"dense_mlp.gate_proj", DenseMLP},
	GroupDenseUp:     {"dense_mlp.up_proj", DenseMLP},
	GroupDenseDown:   {"dense_mlp.down_proj", DenseMLP},
	GroupRouterGate:  {"router.gate", Router},
	GroupRouterBias:  {"router.e_score_correction_bias", Router},
	GroupLatentDown:  {"latent.down_proj", Latent},
	GroupLatentUp:    {"latent.up_proj", Latent},
	GroupLatentNorm:  {"latent.norm", Latent},
	GroupSharedGate:  {"shared_experts.gate_proj", SharedExperts},
	GroupSharedUp:    {"shared_experts.up_proj", SharedExperts},
	GroupSharedDown:  {"shared_experts.down_proj", SharedExperts},
	GroupExperts:     {"experts", RoutedExperts},
	GroupLayerNorms:  {"layer_norms", Norms},
	GroupAttnRes:     {"attn_res", Norms},
	GroupEmbedding:   {"embedding", Embedding},
	GroupLMHead:      {"lm_head", LMHead},
	GroupFinalNorms:  {"final_norms", Norms},
	GroupVisionTower: {"vision_tower", Vision},
	GroupMMProjector: {"mm_projector", Vision},
}

// String is the group's stable name, e.g. "kda.q_proj", "shared_experts.down_proj".
func (g Group) String() string {
	if int(g) < NumGroups {
		return groupInfo[g].name
	}
	return fmt.Sprintf("Group(%d)", uint8(g))
}

// Component is the accounting class the group's tensors are counted in.
func (g Group) Component() Component {
	if int(g) < NumGroups {
		return groupInfo[g].comp
	}
	return Other
}

// Family is the part of the name before the dot ("kda" for "kda.q_proj"),
// or the whole name for a group without one ("experts").
func (g Group) Family() string {
	n := g.String()
	if i := strings.IndexByte(n, '.'); i >= 0 {
		return n[:i]
	}
	return n
}

// ParseGroup maps a group's name back to the group.
func ParseGroup(s string) (Group, error) {
	for i := range groupInfo {
		if groupInfo[i].name == s {
			return Group(i), nil
		}
	}
	return GroupOther, fmt.Errorf("model: unknown tensor group %q", s)
}

// GroupSet is a set of groups.
type GroupSet uint64

// Groups builds a set from its members.
func Groups(gs ...Group) GroupSet {
	var s GroupSet
	for _, g := range gs {
		s |= 1 << g
	}
	return s
}

// AllGroups is every group but GroupOther.
const AllGroups = GroupSet(1<<NumGroups-1) &^ 1

// Has reports whether g is in the set.
func (s GroupSet) Has(g Group) bool { return int(g) < NumGroups && s&(1<<g) != 0 }

// Members lists the set's groups in Group order.
func (s GroupSet) Members() []Group {
	var out []Group
	for g := range Group(NumGroups) {
		if s.Has(g) {
			out = append(out, g)
		}
	}
	return out
}

// String lists the members' names, comma separated (what ParseGroupSet reads).
func (s GroupSet) String() string {
	var b strings.Builder
	for _, g := range s.Members() {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(g.String())
	}
	return b.String()
}

// ParseGroupSet reads a comma-separated list of group names. A family name
// ("kda", "mla", "dense_mlp", "router", "latent", "shared_experts") stands
// for all of its groups. Spaces around names are ignored; an empty list is
// the empty set; an unknown name is an error that says which.
func ParseGroupSet(list string) (GroupSet, error) {
	var s GroupSet
	if strings.TrimSpace(list) == "" {
		return 0, nil
	}
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if g, err := ParseGroup(item); err == nil {
			s |= Groups(g)
			continue
		}
		var fam GroupSet
		for g := range Group(NumGroups) {
			if g != GroupOther && g.Family() == item && strings.Contains(g.String(), ".") {
				fam |= Groups(g)
			}
		}
		if fam == 0 {
			return 0, fmt.Errorf("model: unknown tensor group %q", item)
		}
		s |= fam
	}
	return s, nil
}
