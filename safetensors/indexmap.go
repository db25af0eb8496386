package safetensors

import (
	"bytes"
	"runtime"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// minParallelWeightMap is the size from which an index's weight_map is
// parsed in pieces on several CPUs (Kimi-K3's is 58 MB).
const minParallelWeightMap = 8 << 20

// weightMap collects the members of an index's weight_map.
type weightMap struct {
	entries []indexEntry
	// provisional are the files in order of first appearance; fileIDs maps
	// their raw spellings to their ids.
	provisional []string
	fileIDs     map[string]uint32
	lastRaw     []byte // the previous entry's file, as spelled, and its id
	lastID      uint32
}

// members parses weight_map members from p.i, a member's start, up to the
// closing '}' (consumed; closed is true) or, when stop >= 0, until the next
// member would start at or past stop. fail formats the errors.
func (w *weightMap) members(p *parser, stop int, fail func(string, ...any) error) (closed bool, err error) {
	for {
		if p.eat('}') {
			return true, nil
		}
		if stop >= 0 && p.i >= stop {
			return false, nil
		}
		p.ws()
		t, err := p.str()
		if err != nil {
			return false, fail("weight_map: %v", err)
		}
		p.ws()
		if !p.eat(':') {
			return false, fail("expected ':' at byte %d", p.i)
		}
		p.ws()
		raw, esc, err := p.rawStr()
		if err != nil {
			return false, fail("weight_map[%s]: %v", termtext.Name(t), err)
		}
		// Neighbours mostly name one file: the previous one is tried first.
		id, ok := w.lastID, w.lastRaw != nil && bytes.Equal(raw, w.lastRaw)
		if !ok {
			id, ok = w.fileIDs[string(raw)]
		}
		if !ok {
			f := string(raw)
			if esc {
				if f, err = p.unescape(raw); err != nil {
					return false, fail("weight_map[%s]: %v", termtext.Name(t), err)
				}
			}
			if err := checkShardName(f); err != nil {
				return false, fail("tensor %s: %v", termtext.Name(t), err)
			}
			id = uint32(len(w.provisional))
			w.provisional = append(w.provisional, f)
			w.fileIDs[string(raw)] = id
		}
		w.lastRaw, w.lastID = raw, id
		w.entries = append(w.entries, indexEntry{t, id})
		if err := p.next('}'); err != nil {
			return false, fail("weight_map: %v", err)
		}
	}
}

// parallel parses a large weight_map from p.i (the first member's start)
// in pieces, one per CPU, and reports whether it did: then p is past the
// closing '}' and w holds what members would have collected (file ids
// aside, which the caller renumbers). A piece starts after a newline, at
// what is assumed to be a member's start, and the piece before must end
// exactly there. Otherwise, or on any error, p is left where it was and the
// caller parses in order, so errors are those of the sequential parse.
func (w *weightMap) parallel(p *parser, fail func(string, ...any) error) bool {
	n := len(p.b) - p.i
	k := min(runtime.GOMAXPROCS(0), 8)
	if n < minParallelWeightMap || k < 2 {
		return false
	}
	starts := []int{p.i}
	for j := 1; j < k; j++ {
		at := p.i + n/k*j
		nl := bytes.IndexByte(p.b[at:], '\n')
		if nl < 0 {
			break
		}
		q := parser{b: p.b, i: at + nl + 1}
		q.ws()
		if q.i > starts[len(starts)-1] && q.i < len(p.b) {
			starts = append(starts, q.i)
		}
	}
	if len(starts) < 2 {
		return false
	}
	type piece struct {
		w      weightMap
		end    int
		closed bool
		err    error
	}
	pieces := make([]piece, len(starts))
	var wg sync.WaitGroup
	for j := range starts {
		wg.Go(func() {
			stop, size := -1, len(p.b)-starts[j]
			if j+1 < len(starts) {
				stop, size = starts[j+1], starts[j+1]-starts[j]
			}
			pc := &pieces[j]
			pc.w = weightMap{entries: make([]indexEntry, 0, size/100), fileIDs: map[string]uint32{}}
			q := parser{b: p.b, s: p.s, i: starts[j]}
			pc.closed, pc.err = pc.w.members(&q, stop, fail)
			pc.end = q.i
		})
	}
	wg.Wait()
	total := 0
	for j, pc := range pieces {
		last := j == len(pieces)-1
		if pc.err != nil || pc.closed != last || (!last && pc.end != starts[j+1]) {
			return false
		}
		total += len(pc.w.entries)
	}
	w.entries = make([]indexEntry, 0, total)
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
