package layout

import (
	"fmt"
	"io"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// maxShardBytes is the size at which an output file is closed and the next
// begun (huggingface's default max_shard_size).
const maxShardBytes = 5_000_000_000

// maxRunBytes bounds one copy run (and each part of a verbatim copy), so
// that cancellation, checked between them, is never held up for long.
const maxRunBytes = 256 << 20

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

type outFile struct {
	name    string
	meta    map[string]string
	tensors []outTensor
	// verbatim is a canonical source shard this file copies whole: the
	// same bytes as writing its tensors one by one.
	verbatim *safetensors.File
	lay      *safetensors.FilePlan // header and offsets
	steps    []fileStep            // the writes, in data order
	// readers, when set, reads source files (a remote source's stream).
	readers func(*safetensors.File) io.ReaderAt
}

func (of *outFile) reader(f *safetensors.File) io.ReaderAt {
	if of.readers != nil {
		return of.readers(f)
	}
	return f.ReaderAt()
}

// fileStep is one write of an output file: a run of whole tensors that lie
// back to back in one source file and in the output (one copy), or one
// tensor written alone (a slice, packed scales, a rebuilt tensor).
type fileStep struct {
	first, last int // output tensors, in the layout's data order
	tensor      int // a lone tensor's index in outFile.tensors, -1 for a run
	// src, off and n are a run's source file, absolute offset and length.
	src    *safetensors.File
	off, n int64
}

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

// plan fixes the file's layout and steps: consecutive whole tensors that
// are also contiguous in one source file are grouped into copy runs of up to
// maxRunBytes. A verbatim copy has no steps.
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

func (of *outFile) tensorBytes() int64 { return of.lay.Size - of.lay.DataStart }
