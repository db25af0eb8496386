package inspect

import (
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// tally counts tensors and their bytes.
type tally struct {
	Tensors int64 `json:"tensors"`
	Bytes   int64 `json:"bytes"`
}

func (s *tally) add(bytes int64) {
	s.Tensors++
	s.Bytes += bytes
}

func (s *tally) merge(o tally) {
	s.Tensors += o.Tensors
	s.Bytes += o.Bytes
}

// row is one line of a grouped table: a component, dtype, layer, file, stage or rank.
type row struct {
	Key string `json:"name"`
	tally
}

// step is one bar of the per-rank memory chart: a deployment change and one rank's bytes.
type step struct {
	Label string `json:"step"`  // the step's name on the chart (e.g. "FP8")
	Rank  int    `json:"rank"`  // the rank shown: the one holding the most
	Total int64  `json:"bytes"` // the rank's resident weight bytes
	// Sliced is the full size of the tensors the rank holds only a slice of.
	Sliced     int64 `json:"sliced_bytes"`
	Components []row `json:"components"` // Total by component
}

// ledger sums tensors in all, by component and by dtype.
type ledger struct {
	all   tally
	comp  [model.NumComponents]tally
	dtype [256]tally
}

func (l *ledger) add(c model.Component, d safetensors.DType, bytes int64) {
	l.all.add(bytes)
	l.comp[c].add(bytes)
	l.dtype[d].add(bytes)
}

func (l *ledger) merge(o *ledger) {
	l.all.merge(o.all)
	for c := range l.comp {
		l.comp[c].merge(o.comp[c])
	}
	for d := range l.dtype {
		l.dtype[d].merge(o.dtype[d])
	}
}

func (l *ledger) accounting() accounting {
	return accounting{TensorCount: l.all.Tensors, TotalBytes: l.all.Bytes, Components: componentRows(l.comp[:]), DTypes: dtypeRows(l.dtype[:])}
}
