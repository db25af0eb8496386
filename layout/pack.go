package layout

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// MaxScaleBytes bounds a block scale tensor read into memory for packing or
// unpacking (K3's largest, lm_head-sized, would be 280 KB).
const MaxScaleBytes = 256 << 20

// packJob packs the part of a block scale that covers a rank's weight piece.
type packJob struct {
	name       string
	src        tensorData
	grid       [2]int64 // the scale's block grid [⌈N/128⌉, ⌈K/128⌉]
	rows, cols [2]int64 // weight rows, block columns covered
	// How the packed scale relates to the F32 one, for the manifest.
	held        Held
	axis        int
	start, stop int64
	mode        ScaleMode
}

// newPackJob works out which weight rows and block columns a rank's packed
// scale covers. Packed scales hold one row per weight row, so a row split
// always carries exactly its rows, even when it cuts a 128 block; a column
// split carries its block columns when it is 128-aligned, else all of them.
func newPackJob(sc, w Piece, src tensorData) (*packJob, error) {
	if w.Name == "" || len(w.Shape) != 2 {
		return nil, fmt.Errorf("%w: tensor %s: cannot pack the scale of %s, which the rank does not hold", ErrLayout, sc.Name, sc.ScaleOf)
	}
	if sc.DType != safetensors.F32 {
		return nil, fmt.Errorf("%w: tensor %s: packing needs F32 scales, not %s", ErrLayout, sc.Name, sc.DType)
	}
	n, k := w.Shape[0], w.Shape[1]
	gk := ceilDiv(k, quant.BlockSize)
	pj := &packJob{name: sc.Name, src: src, grid: [2]int64{ceilDiv(n, quant.BlockSize), gk},
		rows: [2]int64{0, n}, cols: [2]int64{0, gk}, held: sc.Held, axis: sc.Axis, start: sc.Start, stop: sc.Stop, mode: sc.Scale}
	if size, _ := safetensors.ByteSize(sc.DType, sc.Shape); size > MaxScaleBytes {
		return nil, fmt.Errorf("%w: tensor %s: %d-byte scale (limit %d)", ErrLayout, sc.Name, size, MaxScaleBytes)
	}
	if w.Held == HeldSlice {
		switch w.Axis {
		case 0:
			pj.rows = [2]int64{w.Start, w.Stop}
			pj.held, pj.axis, pj.mode = HeldSlice, 0, ScaleFollow
			pj.start, pj.stop = w.Start/quant.BlockSize, ceilDiv(w.Stop, quant.BlockSize)
		case 1:
			if w.Start%quant.BlockSize == 0 && (w.Stop%quant.BlockSize == 0 || w.Stop == k) {
				pj.cols = [2]int64{w.Start / quant.BlockSize, ceilDiv(w.Stop, quant.BlockSize)}
			}
		}
	}
	return pj, nil
}

// shape is the stored int32 shape [⌈cols/4⌉, align(rows, 4)].
func (pj *packJob) shape() []int64 {
	return []int64{ceilDiv(pj.cols[1]-pj.cols[0], 4), align4(pj.rows[1] - pj.rows[0])}
}

func align4(n int64) int64 { return ceilDiv(n, 4) * 4 }

func (pj *packJob) describe() *Packed {
	return &Packed{Format: PackUE8M0.String(), Rows: pj.rows, Cols: pj.cols, Shape: pj.shape()}
}

// blockScales reads the covered block rows and columns of the scale and
// checks that they are UE8M0 (positive powers of two), which packing keeps
// exactly and any other value would lose.
func (pj *packJob) blockScales() (rows [2]int64, v []float32, err error) {
	b0, b1 := pj.rows[0]/quant.BlockSize, ceilDiv(pj.rows[1], quant.BlockSize)
	kc := pj.cols[1] - pj.cols[0]
	v = make([]float32, (b1-b0)*kc)
	row := make([]byte, kc*4)
	for b := b0; b < b1; b++ {
		if err := readFull(pj.src, row, (b*pj.grid[1]+pj.cols[0])*4); err != nil {
			return rows, nil, fmt.Errorf("tensor %s: %w", pj.name, err)
		}
		for c := int64(0); c < kc; c++ {
			bits := binary.LittleEndian.Uint32(row[4*c:])
			if bits&0x807FFFFF != 0 || bits>>23 == 0 || bits>>23 == 0xFF {
				return rows, nil, fmt.Errorf("%w: tensor %s: block (%d, %d) scale %g is not a power of two; convert with UE8M0 scales to pack",
					ErrLayout, pj.name, b, pj.cols[0]+c, math.Float32frombits(bits))
			}
			v[(b-b0)*kc+c] = math.Float32frombits(bits)
		}
	}
	return [2]int64{b0, b1}, v, nil
}

// bytes returns the packed scale as little-endian int32s.
func (pj *packJob) bytes() ([]byte, error) {
	blocks, v, err := pj.blockScales()
	if err != nil {
		return nil, err
	}
	kc := pj.cols[1] - pj.cols[0]
	n := pj.rows[1] - pj.rows[0]
	perRow := make([]float32, n*kc)
	for r := int64(0); r < n; r++ {
		b := (pj.rows[0]+r)/quant.BlockSize - blocks[0]
		copy(perRow[r*kc:(r+1)*kc], v[b*kc:(b+1)*kc])
	}
	packed := packRowsUE8M0(perRow, int(n), int(kc))
	out := make([]byte, 4*len(packed))
	for i, p := range packed {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(p))
	}
	return out, nil
}

// unpackScale rebuilds a source F32 block scale from packed pieces: each is
// unpacked to one scale row per weight row, the rows of one 128 block must
// agree, and the pieces are gathered into the full block grid.
func unpackScale(name string, hs []holder) (tensorData, error) {
	e := hs[0].e
	size, err := safetensors.ByteSize(e.DType, e.Shape)
	if err != nil || e.DType != safetensors.F32 || size > MaxScaleBytes {
		return nil, fmt.Errorf("%w: tensor %s: packed scale of source %s %v", ErrManifest, name, e.DType, e.Shape)
	}
	var gn, gk int64
	switch len(e.Shape) {
	case 2:
		gn, gk = e.Shape[0], e.Shape[1]
	case 4:
		gn, gk = e.Shape[0], e.Shape[2]
	default:
		return nil, fmt.Errorf("%w: tensor %s: packed scale of a %d-D source", ErrManifest, name, len(e.Shape))
	}
	grid := make([]uint32, gn*gk)
	set := make([]bool, gn*gk)
	sort.SliceStable(hs, func(a, b int) bool { return hs[a].e.Packed.Rows[0] < hs[b].e.Packed.Rows[0] })
	for _, h := range hs {
		p := h.e.Packed
		if p == nil || p.Format != PackUE8M0.String() {
			return nil, fmt.Errorf("%w: %s: tensor %s: mixes packed and unpacked pieces", ErrManifest, h.dir, name)
		}
		n, kc := p.Rows[1]-p.Rows[0], p.Cols[1]-p.Cols[0]
		if p.Rows[0] < 0 || n <= 0 || ceilDiv(p.Rows[1], quant.BlockSize) > gn || p.Cols[0] < 0 || kc <= 0 || p.Cols[1] > gk {
			return nil, fmt.Errorf("%w: %s: tensor %s: packed rows %v cols %v outside the %d×%d block grid", ErrManifest, h.dir, name, p.Rows, p.Cols, gn, gk)
		}
		want := []int64{ceilDiv(kc, 4), align4(n)}
		if h.t.DType != safetensors.I32 || !equalShape(h.t.Shape, want) {
			return nil, fmt.Errorf("%w: %s/%s: tensor %s is %s %v, packed rows %v cols %v need I32 %v", ErrManifest, h.dir, h.e.File, name, h.t.DType, h.t.Shape, p.Rows, p.Cols, want)
		}
		raw := make([]byte, h.t.Size())
		if err := readFull(fileTensor{h.f, h.t}, raw, 0); err != nil {
			return nil, fmt.Errorf("%s/%s: tensor %s: %w", h.dir, h.e.File, name, err)
		}
		words := make([]int32, len(raw)/4)
		for i := range words {
			words[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		rows := unpackRowsUE8M0(words, int(n), int(kc))
		for r := int64(0); r < n; r++ {
			b := (p.Rows[0] + r) / quant.BlockSize
			for c := int64(0); c < kc; c++ {
				v := math.Float32bits(rows[r*kc+c])
				at := b*gk + p.Cols[0] + c
				if set[at] && grid[at] != v {
					return nil, fmt.Errorf("%w: %s: tensor %s: weight row %d disagrees with its 128-row block %d at block column %d (%g vs %g)",
						ErrManifest, h.dir, name, p.Rows[0]+r, b, p.Cols[0]+c, math.Float32frombits(v), math.Float32frombits(grid[at]))
				}
				grid[at], set[at] = v, true
			}
		}
	}
	out := make([]byte, size)
	for i, ok := range set {
		if !ok {
			return nil, fmt.Errorf("%w: tensor %s: packed pieces leave block (%d, %d) uncovered; is a rank directory missing?", ErrManifest, name, int64(i)/gk, int64(i)%gk)
		}
		binary.LittleEndian.PutUint32(out[4*i:], grid[i])
	}
	return memTensor(out), nil
}

// checkPacking reads every scale an export will pack, so a scale that is not
// UE8M0 fails the export before anything is written.
func checkPacking(outs []*rankOut) error {
	done := map[string]bool{}
	for _, ro := range outs {
		for _, of := range ro.files {
			for _, t := range of.tensors {
				if t.pack == nil || done[t.spec.Name] {
					continue
				}
				done[t.spec.Name] = true
				pj := *t.pack
				pj.rows, pj.cols = [2]int64{0, pj.grid[0] * quant.BlockSize}, [2]int64{0, pj.grid[1]}
				if _, _, err := pj.blockScales(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
