package convert

import (
	"fmt"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// StepKind is what one step of a shard's program writes.
type StepKind uint8

const (
	// StepCopy copies a run of kept tensors that lie back to back, in the
	// same order, in the source and in the output: one span writer, one copy
	// (hundreds of expert tensors of a layer move as one).
	StepCopy StepKind = iota
	// StepScales quantizes a weight to get its block scales and writes the
	// scale tensor. Scale tensors (F32) precede the FP8 codes in a canonical
	// file; writing strictly in file order lets the executor hash the file
	// as it writes it instead of reading it back, so the codes are either
	// held in memory until their place (HoldCodes) or made again there.
	StepScales
	// StepCodes writes a weight's FP8 codes: the held ones, or quantizing
	// the weight once more.
	StepCodes

	numStepKinds = int(StepCodes) + 1
)

var stepKindNames = [numStepKinds]string{StepCopy: "copy", StepScales: "scales", StepCodes: "codes"}

// String names the kind.
func (k StepKind) String() string {
	if int(k) < numStepKinds {
		return stepKindNames[k]
	}
	return fmt.Sprintf("StepKind(%d)", uint8(k))
}

// MaxRunBytes bounds the tensors one copy run gathers (a longer single
// tensor, K3's 2.2 GB embedding, is a run of its own): a layer's experts
// (15.7 GB in K3) move in several spans.
const MaxRunBytes = 256 << 20

// MaxHeldCodes bounds the FP8 codes a job holds in memory between a file's
// scale steps and its code steps. A file whose codes fit is quantized once;
// a larger one (a K3 layer has about 0.9 GB) is quantized twice, since
// reading its weights again costs less than reading the written file back.
const MaxHeldCodes = 32 << 20

// Step is one piece of work on an output shard, decided at plan time. A
// shard's steps write its tensors in file order, each exactly once.
type Step struct {
	Kind StepKind
	// First and Last index output tensors (in the layout's data order). A
	// copy run writes First…Last; StepScales writes the scale tensor First
	// of the weight Last; StepCodes writes the FP8 codes First of the weight
	// whose scale tensor is Last.
	First, Last int
	// Src and Len are the source bytes the step reads: the absolute offset in
	// the source file and the length of the run, or of the weight.
	Src, Len int64
	// HoldCodes, on a file's scale and code steps, says that StepScales
	// keeps the FP8 codes it makes and StepCodes writes them without
	// reading the weight again.
	HoldCodes bool
	// Source is the weight a scale or code step quantizes (its dtype, shape
	// and offsets in the source file).
	Source safetensors.TensorInfo
}

// Writes is how many output tensors the step writes.
func (s Step) Writes() int {
	if s.Kind == StepCopy {
		return s.Last - s.First + 1
	}
	return 1
}

// planSteps turns a shard's outputs (in the layout's data order) into steps
// in the same order: consecutive kept tensors whose source bytes are
// contiguous and in the same order form one copy run (up to MaxRunBytes), so
// a run never spans a tensor that is quantized, dropped or a scale, since
// those break the contiguity on one side; each scale tensor and each FP8
// weight is a step of its own, holding the codes in between when all of the
// file's fit MaxHeldCodes.
func planSteps(sf *safetensors.File, l *safetensors.Layout, outs []OutputTensor) ([]Step, error) {
	if len(outs) != len(l.Tensors) {
		return nil, fmt.Errorf("file %s: %d outputs for %d laid-out tensors", sf.Path, len(outs), len(l.Tensors))
	}
	pair := map[string][2]int{} // a quantized weight → its output indices (codes, scale)
	var codes int64
	for i, o := range outs {
		switch o.Role {
		case RoleWeight:
			codes += l.Tensors[i].Size()
			p := pair[o.Source]
			p[0] = i + 1
			pair[o.Source] = p
		case RoleScale:
			p := pair[o.Source]
			p[1] = i + 1
			pair[o.Source] = p
		}
	}
	var steps []Step
	for i, o := range outs {
		src, ok := sf.Lookup(o.Source)
		if !ok {
			return nil, fmt.Errorf("file %s: tensor %s: %w in the source", sf.Path, o.Source, safetensors.ErrNotFound)
		}
		abs := sf.DataStart + src.Begin
		switch o.Role {
		case RoleCopy:
			if src.Size() != l.Tensors[i].Size() {
				return nil, fmt.Errorf("file %s: tensor %s: %w: %d source bytes for %d output bytes", sf.Path, o.Name, safetensors.ErrSizeMismatch, src.Size(), l.Tensors[i].Size())
			}
			if n := len(steps); n > 0 {
				last := &steps[n-1]
				if last.Kind == StepCopy && last.Last == i-1 && last.Src+last.Len == abs && last.Len+src.Size() <= MaxRunBytes {
					last.Last, last.Len = i, last.Len+src.Size()
					continue
				}
			}
			steps = append(steps, Step{Kind: StepCopy, First: i, Last: i, Src: abs, Len: src.Size()})
		case RoleWeight, RoleScale:
			p := pair[o.Source]
			if p[0] == 0 || p[1] == 0 {
				return nil, fmt.Errorf("file %s: tensor %s: planned without both its FP8 codes and its scale", sf.Path, o.Source)
			}
			st := Step{Kind: StepCodes, First: p[0] - 1, Last: p[1] - 1, Src: abs, Len: src.Size(), HoldCodes: codes <= MaxHeldCodes, Source: src}
			if o.Role == RoleScale {
				st.Kind, st.First, st.Last = StepScales, p[1]-1, p[0]-1
			}
			steps = append(steps, st)
		}
	}
	return steps, nil
}
