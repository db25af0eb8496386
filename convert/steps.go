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
	// StepQuantize quantizes one weight into its FP8 codes and its scale tensor.
	StepQuantize

	numStepKinds = int(StepQuantize) + 1
)

var stepKindNames = [numStepKinds]string{StepCopy: "copy", StepQuantize: "quantize"}

// String names the kind.
func (k StepKind) String() string {
	if int(k) < numStepKinds {
		return stepKindNames[k]
	}
	return fmt.Sprintf("StepKind(%d)", uint8(k))
}

// MaxRunBytes bounds one copy run, so that a layer's experts (15.7 GB in K3)
// move in several copies and cancellation and progress are not held up by
// one long system call.
const MaxRunBytes = 256 << 20

// Step is one piece of work on an output shard, decided at plan time.
type Step struct {
	Kind StepKind
	// First and Last index the output tensors (in the layout's data order):
	// a copy run's first and last tensor, or a quantized weight's FP8 codes
	// (First) and its scale tensor (Last).
	First, Last int
	// Src and Len are the source bytes the step reads: the absolute offset in
	// the source file and the length of the run, or of the weight.
	Src, Len int64
}

// planSteps groups a shard's outputs (in the layout's data order) into steps:
// each quantized weight is one step, and consecutive kept tensors whose
// source bytes are contiguous and in the same order form one copy run (up to
// MaxRunBytes). A run therefore never spans a tensor that is quantized or
// dropped, nor a scale tensor, since those break the contiguity on one side.
func planSteps(sf *safetensors.File, l *safetensors.Layout, outs []OutputTensor) ([]Step, error) {
	scaleAt := map[string]int{} // a quantized weight's name → its scale's output index
	for i, o := range outs {
		if o.Role == RoleScale {
			scaleAt[o.Source] = i
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
		case RoleWeight:
			si, ok := scaleAt[o.Source]
			if !ok {
				return nil, fmt.Errorf("file %s: tensor %s: no scale tensor planned", sf.Path, o.Name)
			}
			steps = append(steps, Step{Kind: StepQuantize, First: i, Last: si, Src: abs, Len: src.Size()})
		}
	}
	return steps, nil
}
