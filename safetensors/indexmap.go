package safetensors

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// minParallelWeightMap is the index size from which its weight_map is parsed
// in pieces on several CPUs (Kimi-K3's index is 58 MB); a test lowers it.
var minParallelWeightMap = 8 << 20

// weightMap collects the entries of an index's weight_map.
type weightMap struct {
	entries []indexEntry
	// provisional lists the files in order of first appearance; ids maps
	// their raw spellings to their places in it.
	provisional []string
	ids         map[string]uint32
	lastRaw     []byte // the previous entry's file, as spelled, and its id
	lastID      uint32
}

// entry parses the file of tensor t at p.i.
func (w *weightMap) entry(p *parser, t string) error {
	raw, esc, err := p.rawStr()
	if err != nil {
		return fmt.Errorf("tensor %s: %v", termtext.Name(t), err)
	}
	// Neighbours mostly name one file: the previous one is tried first.
	id, ok := w.lastID, w.lastRaw != nil && bytes.Equal(raw, w.lastRaw)
	if !ok {
		id, ok = w.ids[string(raw)]
	}
	if !ok {
		f := string(raw)
		if esc {
			f, err = p.unescape(raw)
		}
		if err == nil {
			err = checkShardName(f)
		}
		if err != nil {
			return fmt.Errorf("tensor %s: %v", termtext.Name(t), err)
		}
		id = uint32(len(w.provisional))
		w.provisional = append(w.provisional, f)
		w.ids[string(raw)] = id
	}
	w.lastRaw, w.lastID = raw, id
	w.entries = append(w.entries, indexEntry{t, id})
	return nil
}

var errPiece = errors.New("not a member boundary")

// piece parses members from p.i, a member's start, through the closing '}'
// (closed) or until the next member would start at or past stop (stop < 0:
// no stop).
func (w *weightMap) piece(p *parser, stop int) (closed bool, err error) {
	for {
		t, err := p.str()
		if err != nil {
			return false, err
		}
		p.ws()
		if !p.eat(':') {
			return false, errPiece
		}
		p.ws()
		if err := w.entry(p, t); err != nil {
			return false, err
		}
		p.ws()
		if p.eat('}') {
			return true, nil
		}
		if !p.eat(',') {
			return false, errPiece
		}
		p.ws()
		if stop >= 0 && p.i >= stop {
			return false, nil
		}
	}
}

// parallel parses a large weight_map at p.i (its '{') in pieces, one per
// CPU, and reports whether it did: then p is past the closing '}' and w
// holds what the sequential parse collects (a file may appear in
// provisional more than once: the caller renumbers). A piece starts after a
// newline, where a member is assumed to start, and the piece before must
// end exactly there. Otherwise, or on any error, p is left where it was and
// the caller parses in order, so errors are the sequential parse's.
func (w *weightMap) parallel(p *parser) bool {
	n := len(p.b) - p.i
	k := min(runtime.GOMAXPROCS(0), 8)
	if n < minParallelWeightMap || k < 2 {
		return false
	}
	q := *p
	q.eat('{')
	q.ws()
	if q.at('}') {
		return false
	}
	starts := []int{q.i}
	for j := 1; j < k; j++ {
		at := q.i + n/k*j
		nl := bytes.IndexByte(p.b[at:], '\n')
		if nl < 0 {
			break
		}
		r := parser{b: p.b, i: at + nl + 1}
		r.ws()
		if r.i > starts[len(starts)-1] && r.i < len(p.b) {
			starts = append(starts, r.i)
		}
	}
	if len(starts) < 2 {
		return false
	}
	type result struct {
		w      weightMap
		end    int
		closed bool
		err    error
	}
	pieces := make([]result, len(starts))
	var wg sync.WaitGroup
	for j := range starts {
		wg.Go(func() {
			stop, size := -1, len(p.b)-starts[j]
			if j+1 < len(starts) {
				stop, size = starts[j+1], starts[j+1]-starts[j]
			}
			pc := &pieces[j]
			pc.w = weightMap{entries: make([]indexEntry, 0, size/100), ids: map[string]uint32{}}
			r := parser{b: p.b, s: p.s, i: starts[j]}
			pc.closed, pc.err = pc.w.piece(&r, stop)
			pc.end = r.i
		})
	}
	wg.Wait()
	total := len(w.entries)
	for j, pc := range pieces {
		last := j == len(pieces)-1
		if pc.err != nil || pc.closed != last || (!last && pc.end != starts[j+1]) {
			return false
		}
		total += len(pc.w.entries)
	}
	w.entries = slices.Grow(w.entries, total-len(w.entries))
	for _, pc := range pieces {
		base := uint32(len(w.provisional))
		w.provisional = append(w.provisional, pc.w.provisional...)
		for _, e := range pc.w.entries {
			w.entries = append(w.entries, indexEntry{e.name, base + e.file})
		}
	}
	p.i = pieces[len(pieces)-1].end
	return true
}
