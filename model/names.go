package model

import (
	"fmt"
	"slices"
	"strings"
)

// Role is what a tensor is to its module: the weight itself, one of the
// companions a quantized weight carries (packed codes, scales in each
// engine's convention), or another parameter (dt_bias, a bias…).
type Role uint8

const (
	// roleParam is a parameter that is not a module's weight or companion
	// (dt_bias, A_log, a bias); its module is the name before its last segment.
	roleParam Role = iota
	// RoleWeight is X.weight (for ModelOpt NVFP4, the packed FP4 codes).
	RoleWeight
	// RolePacked is X.weight_packed: compressed-tensors packed codes (MXFP4, NVFP4).
	RolePacked
	roleScale    // group scales, FP8 block scales (compressed-tensors, ModelOpt), NVFP4 block scales
	roleScaleInv // DeepSeek-style block-FP8 scales

	numRoles = len(roleSuffix)
)

// roleSuffix is each role's last name segment, in Role order.
var roleSuffix = [...]string{
	"", "weight", "weight_packed", "weight_scale", "weight_scale_inv",
	"weight_scale_2",      // ModelOpt NVFP4's per-tensor second-level scale
	"input_scale",         // a static activation scale
	"weight_global_scale", // compressed-tensors NVFP4's per-tensor scale
	"input_global_scale",  // compressed-tensors NVFP4's activation scale
	"weight_zero_point",   // compressed-tensors asymmetric zero points
}

// String is the role's name suffix ("weight_scale_inv"), "param" for RoleParam.
func (r Role) String() string {
	switch {
	case r == roleParam:
		return "param"
	case int(r) < numRoles:
		return roleSuffix[r]
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// SplitRole splits a tensor name into its module and role:
// "a.q_proj.weight_scale_inv" → ("a.q_proj", roleScaleInv), "a.self_attn.dt_bias"
// → ("a.self_attn", roleParam).
func SplitRole(name string) (module string, role Role) {
	dot := strings.LastIndexByte(name, '.')
	if i := slices.Index(roleSuffix[:], name[dot+1:]); i > 0 {
		role = Role(i)
	}
	if dot < 0 {
		return "", role
	}
	return name[:dot], role
}

// expertProjection is which of a routed expert's three projections a tensor is.
type expertProjection uint8

// The projections; zero is no routed expert tensor, or an unknown name.
const (
	_        expertProjection = iota
	expertW1                  // gate (w1, gate_proj), [moe_intermediate, latent]
	expertW2                  // down (w2, down_proj), [latent, moe_intermediate]
	expertW3                  // up (w3, up_proj), [moe_intermediate, latent]
)

var projNames = [...]string{expertW1: "w1", expertW2: "w2", expertW3: "w3"}

// String is "w1", "w2", "w3", or "" for the zero expertProjection.
func (p expertProjection) String() string {
	if int(p) < len(projNames) {
		return projNames[p]
	}
	return ""
}

// TensorName is a tensor name read against the K3 schema.
type TensorName struct {
	// Group is the tensor's group (GroupOther when the schema does not know it).
	Group Group
	// Layer is the 0-based decoder layer, -1 outside the decoder layers.
	Layer int
	// Expert is the routed expert index, -1 for any other tensor.
	Expert int
	// Proj is the routed expert projection (zero for others).
	Proj expertProjection
	// Module is the name without its role suffix: a weight and its
	// companions share it.
	Module string
	// Role is what the tensor is to its module.
	Role Role
}

// ParseName reads a tensor name of either prefix (K3: language_model.model.…
// or model.…). A name the schema does not know gets groupOther, with Layer,
// Module and Role still filled in, so it is placed and reported.
func (c *Classifier) ParseName(name string) TensorName {
	s := c.s
	module, role := SplitRole(name)
	t := TensorName{Layer: -1, Expert: -1, Module: module, Role: role}
	if g, ok := s.rootModules[module]; ok {
		t.Group = g
		return t
	}
	// key names the tensor's kind from offset off: its module, or a parameter's name.
	key := func(off int) string {
		if role == roleParam {
			return name[off:]
		}
		if len(module) < off {
			return ""
		}
		return module[off:]
	}
	off := 0
	if strings.HasPrefix(name, s.outer) {
		off = len(s.outer)
	}
	if !strings.HasPrefix(name[off:], s.text) {
		t.Group = s.rootGroup(name)
		return t
	}
	off += len(s.text)
	tail, ok := strings.CutPrefix(name[off:], s.layers)
	var layer int
	var rest string
	if ok {
		layer, rest, ok = leadingInt(tail)
	} else if layer, rest, ok = c.extraLayer(name[off:]); !ok {
		t.Group = s.textTop[key(off)]
		return t
	}
	if !ok || len(rest) < 2 || rest[0] != '.' {
		return t
	}
	t.Layer = layer
	tail = rest[1:]
	// 99.5% of a K3 checkpoint is routed-expert tensors: settle them first.
	if e, proj, ok := s.expertTail(tail); ok {
		t.Group, t.Expert, t.Proj = GroupExperts, e, proj
		return t
	}
	g, ok := s.layerKeys[key(len(name)-len(tail))]
	switch {
	case !ok:
	case g.mla == 0:
		t.Group = g.kda
	case g.kda == 0:
		t.Group = g.mla
	case layer >= len(c.mla):
		// o_proj/g_proj of a layer outside the schedule cannot be resolved.
	case c.mla[layer]:
		t.Group = g.mla
	default:
		t.Group = g.kda
	}
	return t
}

// rootGroup classifies a name outside the text model by the family's root
// prefixes (K3: the vision tower and the projector), which may sit under
// one more module.
func (s *schema) rootGroup(name string) Group {
	for p, g := range s.rootPrefixes {
		if strings.HasPrefix(name, p) {
			return g
		}
	}
	if i := strings.IndexByte(name, '.'); isWord(name[:max(i, 0)], "") {
		for p, g := range s.rootPrefixes {
			if strings.HasPrefix(name[i+1:], p) {
				return g
			}
		}
	}
	return groupOther
}

// isWord reports whether s is a non-empty run of ASCII letters, digits, '_'
// and the bytes of also.
func isWord(s, also string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || strings.ContainsRune(also, r))
	})
}

// expertTail reads "<experts>E.P.…" for any of the family's spellings of
// the routed experts (K3: block_sparse_moe.experts., and mlp.experts. as
// some exports name the MoE block) and the projection P.
func (s *schema) expertTail(tail string) (expert int, proj expertProjection, ok bool) {
	var rest string
	for _, p := range s.expertPaths {
		if rest, ok = strings.CutPrefix(tail, p); ok {
			break
		}
	}
	if !ok {
		return 0, 0, false
	}
	e, rest, ok := leadingInt(rest)
	if !ok || rest == "" || rest[0] != '.' {
		return 0, 0, false
	}
	p := rest[1:]
	if i := strings.IndexByte(p, '.'); i >= 0 {
		p = p[:i]
	}
	return e, s.expertProj[p], true
}

// layerGroup is the group of a layer tensor kind; for kinds that exist in
// both attention types (o_proj, g_proj) the schedule picks kda or mla.
type layerGroup struct{ kda, mla Group }
