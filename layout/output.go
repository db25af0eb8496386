package layout

import (
	"fmt"
	"io"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// maxShardBytes is the size at which an output file is closed and the next
// begun (the 5 GB of huggingface's default max_shard_size).
const maxShardBytes = 5_000_000_000

// maxRunBytes bounds one copy run (and each part of a verbatim copy):
// cancellation is checked between them, so it is never held up for long.
const maxRunBytes = 256 << 20

// outTensor is one tensor of an output file and where its bytes come from.
type outTensor struct {
	spec  safetensors.TensorSpec // as stored
	src   tensorData
	shape []int64 // source shape
	held  held
	axis  int
	start int64
	stop  int64
	pack  *packJob
}

// size is the tensor's stored size (its spec was checked when planned).
func (t *outTensor) size() int64 {
	n, _ := safetensors.ByteSize(t.spec.DType, t.spec.Shape)
	return n
}

// outFile is one planned safetensors file of one output directory.
type outFile struct {
	name    string
	meta    map[string]string
	tensors []outTensor
	// verbatim is a source shard this file copies whole: the directory holds
	// all its tensors unchanged and the shard is in canonical form, so the
	// copy is byte-identical to writing the tensors one by one, at cp speed.
	verbatim *safetensors.File
	// lay is the file's header and offsets; steps write it in data order.
	lay   *safetensors.FilePlan
	steps []fileStep
	// readers, when set, says where a source file's bytes are read (a
	// remote source's stream) instead of its own ReaderAt.
	readers func(*safetensors.File) io.ReaderAt
}

// reader is where the file's steps read source file f.
func (of *outFile) reader(f *safetensors.File) io.ReaderAt {
	if of.readers != nil {
		return of.readers(f)
	}
	return f.ReaderAt()
}

// fileStep is one write of an output file: a run of whole tensors that lie
// back to back, in the same order, in one source file and in the output
// (moved with one span writer and one copy), or one tensor written alone (a
// slice, packed scales, a tensor rebuilt from an export).
type fileStep struct {
	// first and last are output tensors, in the layout's data order.
	first, last int
	// tensor is a lone tensor's index in outFile.tensors, -1 for a run.
	tensor int
	// src, off and n are a run's source file, absolute offset and length.
	src    *safetensors.File
	off, n int64
}

// layout lays the file out canonically.
func (of *outFile) layout() (*safetensors.FilePlan, error) {
	specs := make([]safetensors.TensorSpec, len(of.tensors))
	for i, t := range of.tensors {
		specs[i] = t.spec
	}
	lay, err := safetensors.NewFilePlan(specs, of.meta)
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", of.name, err)
	}
	return lay, nil
}

// plan fixes the file's layout and steps: its tensors in the layout's data
// order, consecutive whole tensors that are also contiguous in one source
// file grouped into copy runs of up to maxRunBytes. A run never includes a
// slice, a packed scale or a tensor rebuilt in memory. A verbatim copy has
// the source's layout and no steps.
func (of *outFile) plan() error {
	of.steps = nil
	lay, err := of.layout()
	if err != nil {
		return err
	}
	of.lay = lay
	if of.verbatim != nil {
		return nil
	}
	at := make(map[string]int, len(of.tensors))
	for i, t := range of.tensors {
		at[t.spec.Name] = i
	}
	for i, lt := range lay.Tensors {
		k := at[lt.Name]
		t := of.tensors[k]
		ft, whole := t.src.(fileTensor)
		if !whole || t.held == HeldSlice || t.pack != nil || ft.t.Size() != lt.Size() {
			of.steps = append(of.steps, fileStep{first: i, last: i, tensor: k})
			continue
		}
		abs := ft.f.DataStart + ft.t.Begin
		if n := len(of.steps); n > 0 {
			last := &of.steps[n-1]
			if last.tensor < 0 && last.src == ft.f && last.last == i-1 && last.off+last.n == abs && last.n+lt.Size() <= maxRunBytes {
				last.last, last.n = i, last.n+lt.Size()
				continue
			}
		}
		of.steps = append(of.steps, fileStep{first: i, last: i, tensor: -1, src: ft.f, off: abs, n: lt.Size()})
	}
	return nil
}

// tensorBytes is the tensor bytes the file holds.
func (of *outFile) tensorBytes() int64 { return of.lay.Size - of.lay.DataStart }
