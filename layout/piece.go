package layout

import "github.com/k3ckpt/k3ckpt/safetensors"

// held says how a rank holds a tensor.
type held = enum[heldSet]

type heldSet struct{}

func (heldSet) set() ([]string, string) {
	return []string{heldReplica: "replicated", HeldSlice: "slice", heldExpert: "expert"}, "held"
}

const (
	heldReplica held = iota // the whole tensor, on every rank of its stage
	// HeldSlice is the slice [Start, Stop) of the tensor along Axis.
	HeldSlice
	heldExpert // the whole tensor, on this one rank (expert parallel)
)

// scaleMode says how a block-FP8 scale tensor is placed relative to its weight.
type scaleMode = enum[scaleModeSet]

type scaleModeSet struct{}

func (scaleModeSet) set() ([]string, string) {
	return []string{scaleNone: "none", scaleFollow: "follow", scaleReplicated: "replicated"}, "scale"
}

const (
	// scaleNone: not the scale of a block-FP8 weight (or a rule matched it).
	scaleNone scaleMode = iota
	// scaleFollow: placed like its weight; a split takes the block rows or
	// columns that cover the weight's slice exactly.
	scaleFollow
	// scaleReplicated: the weight's split cuts a 128 block, so every rank of
	// the group keeps the whole scale.
	scaleReplicated
)

// piece is one tensor, or one slice of one, that a rank holds.
type piece struct {
	Index int // the tensor's position in the planned list
	// Name, DType and Shape are the source tensor's (a slice keeps the name).
	Name  string
	DType safetensors.DType
	Shape []int64
	Held  held
	// Axis, Start and Stop give the slice (HeldSlice only); Valid is the
	// split rule's (a slice of a tensor, not of a scale).
	Axis        int
	Start, Stop int64
	Valid       int64
	Bytes       int64  // what the rank stores for this piece
	Rule        string // the rule that placed it (its weight's, for a following scale)
	ScaleOf     string // the weight, for a block-FP8 scale tensor
	Scale       scaleMode
}

func (p piece) sliceShape() []int64 {
	s := append([]int64(nil), p.Shape...)
	if p.Held == HeldSlice {
		s[p.Axis] = p.Stop - p.Start
	}
	return s
}
