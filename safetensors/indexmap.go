package safetensors

import (
	"bytes"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

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

// members parses weight_map members from p.i, a member's start, up to and
// including the closing '}'. fail formats the errors.
func (w *weightMap) members(p *parser, fail func(string, ...any) error) error {
	for !p.eat('}') {
		p.ws()
		t, err := p.str()
		if err != nil {
			return fail("weight_map: %v", err)
		}
		p.ws()
		if !p.eat(':') {
			return fail("expected ':' at byte %d", p.i)
		}
		p.ws()
		raw, esc, err := p.rawStr()
		if err != nil {
			return fail("weight_map[%s]: %v", termtext.Name(t), err)
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
					return fail("weight_map[%s]: %v", termtext.Name(t), err)
				}
			}
			if err := checkShardName(f); err != nil {
				return fail("tensor %s: %v", termtext.Name(t), err)
			}
			id = uint32(len(w.provisional))
			w.provisional = append(w.provisional, f)
			w.fileIDs[string(raw)] = id
		}
		w.lastRaw, w.lastID = raw, id
		w.entries = append(w.entries, indexEntry{t, id})
		if err := p.next('}'); err != nil {
			return fail("weight_map: %v", err)
		}
	}
	return nil
}
