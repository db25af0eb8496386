package layout

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// packFormat is how block-FP8 scales are stored in an export.
type packFormat string

const (
	// packNone keeps scales as in the source (F32 block grid).
	packNone packFormat = ""
	// packUE8M0 stores scales in DeepGEMM's SM100 packed UE8M0 layout: int32
	// [⌈⌈K/128⌉/4⌉, align(N, 4)], one row per weight row.
	packUE8M0 packFormat = "ue8m0"
)

// ParsePackFormat reads a --pack-scales value ("", "none" or "ue8m0").
func ParsePackFormat(s string) (packFormat, error) {
	switch s {
	case "", "none":
		return packNone, nil
	case "ue8m0":
		return packUE8M0, nil
	}
	return packNone, fmt.Errorf("%w: unknown scale packing %q (want ue8m0)", errLayout, s)
}

// maxScaleBytes bounds a block scale tensor read into memory for packing or
// unpacking.
const maxScaleBytes = 256 << 20

type packJob struct {
	name       string
	src        tensorData
	gk         int64    // block columns of the whole scale
	rows, cols [2]int64 // weight rows and columns covered
}

// newPackJob works out which weight rows and columns a rank's packed scale
// covers: its slice where the scale follows the weight, else all.
func newPackJob(sc, w piece, src tensorData) (*packJob, error) {
	if w.Name == "" || len(w.Shape) != 2 {
		return nil, fmt.Errorf("%w: tensor %s: cannot pack the scale of %s, which the rank does not hold", errLayout, sc.Name, sc.ScaleOf)
	}
	if sc.DType != safetensors.F32 {
		return nil, fmt.Errorf("%w: tensor %s: packing needs F32 scales, not %s", errLayout, sc.Name, sc.DType)
	}
	if size, _ := safetensors.ByteSize(sc.DType, sc.Shape); size > maxScaleBytes {
		return nil, fmt.Errorf("%w: tensor %s: %d-byte scale (limit %d)", errLayout, sc.Name, size, maxScaleBytes)
	}
	n, k := w.Shape[0], w.Shape[1]
	pj := &packJob{name: sc.Name, src: src, gk: ceilDiv(k, quant.BlockSize), rows: [2]int64{0, n}, cols: [2]int64{0, k}}
	if w.Held == HeldSlice && sc.Scale == scaleFollow {
		if w.Axis == 0 {
			pj.rows = [2]int64{w.Start, w.Stop}
		} else {
			pj.cols = [2]int64{w.Start, w.Stop}
		}
	}
	return pj, nil
}

// shape is the stored int32 shape [⌈⌈cols/128⌉/4⌉, align(rows, 4)].
func (pj *packJob) shape() []int64 {
	words, stride := quant.PackedUE8M0Shape(int(pj.rows[1]-pj.rows[0]), int(pj.cols[1]-pj.cols[0]))
	return []int64{int64(words), int64(stride)}
}

// reads calls fn with each read bytes makes, in order: the block grid rows
// the job covers, each from its first block column covered.
func (pj *packJob) reads(fn func(off, n int64)) {
	b0, b1 := pj.rows[0]/quant.BlockSize, ceilDiv(pj.rows[1], quant.BlockSize)
	c0, c1 := pj.cols[0]/quant.BlockSize, ceilDiv(pj.cols[1], quant.BlockSize)
	for b := b0; b < b1; b++ {
		fn((b*pj.gk+c0)*4, (c1-c0)*4)
	}
}

func readLE[T int32 | uint32 | float32](r io.ReaderAt, v []T, off int64) error {
	b := make([]byte, 4*len(v))
	if err := readFull(r, b, off); err != nil {
		return err
	}
	_, err := binary.Decode(b, binary.LittleEndian, v)
	return err
}

func (pj *packJob) bytes() ([]byte, error) {
	var v []float32
	var err error
	pj.reads(func(off, n int64) {
		row := make([]float32, n/4)
		if err == nil {
			err = readLE(pj.src, row, off)
		}
		v = append(v, row...)
	})
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", pj.name, err)
	}
	packed, err := quant.PackUE8M0(v, int(pj.rows[1]-pj.rows[0]), int(pj.cols[1]-pj.cols[0]))
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w (pack UE8M0 scales only: convert with --scale-fmt ue8m0)", pj.name, err)
	}
	return binary.Append(nil, binary.LittleEndian, packed)
}

// unpackScale rebuilds a source F32 block scale from packed pieces, each
// placed in the block grid; pieces held by several ranks must agree.
func unpackScale(name string, hs []holder) (tensorData, error) {
	e := hs[0].e
	size, err := safetensors.ByteSize(e.DType, e.Shape)
	if err != nil || e.DType != safetensors.F32 || size > maxScaleBytes {
		return nil, fmt.Errorf("%w: tensor %s: packed scale of source %s %v", errManifest, name, e.DType, e.Shape)
	}
	var gn, gk int64
	switch len(e.Shape) {
	case 2:
		gn, gk = e.Shape[0], e.Shape[1]
	case 4:
		gn, gk = e.Shape[0], e.Shape[2]
	default:
		return nil, fmt.Errorf("%w: tensor %s: packed scale of a %d-D source", errManifest, name, len(e.Shape))
	}
	grid := make([]uint32, gn*gk)
	set := make([]bool, gn*gk)
	for _, h := range hs {
		p := h.e.Packed
		if p == nil || p.Format != string(packUE8M0) {
			return nil, fmt.Errorf("%w: %s: tensor %s mixes packed and unpacked pieces", errManifest, h.dir, name)
		}
		n, k := p.Rows[1]-p.Rows[0], p.Cols[1]-p.Cols[0]
		b0, c0 := p.Rows[0]/quant.BlockSize, p.Cols[0]/quant.BlockSize
		nb, kb := ceilDiv(n, quant.BlockSize), ceilDiv(k, quant.BlockSize)
		if n <= 0 || k <= 0 || p.Rows[0]%quant.BlockSize != 0 || p.Cols[0]%quant.BlockSize != 0 || b0+nb > gn || c0+kb > gk {
			return nil, fmt.Errorf("%w: %s: tensor %s: packed rows %v cols %v do not sit on the %d×%d block grid", errManifest, h.dir, name, p.Rows, p.Cols, gn, gk)
		}
		words, stride := quant.PackedUE8M0Shape(int(n), int(k))
		if h.t.DType != safetensors.I32 || !slices.Equal(h.t.Shape, []int64{int64(words), int64(stride)}) {
			return nil, fmt.Errorf("%w: %s/%s: tensor %s is %s %v, packed rows %v cols %v need I32 [%d %d]", errManifest, h.dir, h.e.File, name, h.t.DType, h.t.Shape, p.Rows, p.Cols, words, stride)
		}
		packed := make([]int32, h.t.Size()/4)
		if err := readLE(newFileTensor(h.f, h.t), packed, 0); err != nil {
			return nil, fmt.Errorf("%s/%s: tensor %s: %w", h.dir, h.e.File, name, err)
		}
		v, err := quant.UnpackUE8M0(packed, int(n), int(k))
		if err != nil {
			return nil, fmt.Errorf("%w: %s/%s: tensor %s: %w", errManifest, h.dir, h.e.File, name, err)
		}
		for b := range nb {
			for c := range kb {
				bits := math.Float32bits(v[b*kb+c])
				at := (b0+b)*gk + c0 + c
				if set[at] && grid[at] != bits {
					return nil, fmt.Errorf("%w: %s: tensor %s: block (%d, %d) is %g here, %g elsewhere", errManifest, h.dir, name, b0+b, c0+c, v[b*kb+c], math.Float32frombits(grid[at]))
				}
				grid[at], set[at] = bits, true
			}
		}
	}
	if i := int64(slices.Index(set, false)); i >= 0 {
		return nil, fmt.Errorf("%w: tensor %s: packed pieces leave block (%d, %d) uncovered; is a rank directory missing?", errManifest, name, i/gk, i%gk)
	}
	out, err := binary.Append(nil, binary.LittleEndian, grid)
	return bytes.NewReader(out), err
}
