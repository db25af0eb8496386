package safetensors

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// FilePlan is a file's complete plan computed before any data is written: the
// header bytes and every tensor's offsets, in the reference serializer's
// canonical form (tensors by descending dtype, then name; compact JSON; spaces
// padding the header to a multiple of 8), byte-identical to what
// safetensors.torch.save_file writes for the same tensors.
type FilePlan struct {
	// Header is the prefix (length, JSON, padding); nil from NewFilePlanSum.
	Header []byte
	// Tensors lists the tensors in data order with their offsets assigned.
	Tensors []TensorInfo
	// DataStart is len(Header), the absolute offset of the data buffer.
	DataStart int64
	// Size is the total file size.
	Size int64

	index    map[string]int
	metadata map[string]string
}

// headerAlign is the reference's header padding unit.
const headerAlign = 8

// NewFilePlan orders the tensors canonically, assigns offsets and renders the
// header. metadata may be nil; its keys are written sorted.
func NewFilePlan(specs []TensorSpec, metadata map[string]string) (*FilePlan, error) {
	l := &FilePlan{Tensors: make([]TensorInfo, len(specs)), index: make(map[string]int, len(specs)), metadata: metadata}
	dims := 0
	for _, s := range specs {
		dims += len(s.Shape)
	}
	// The shapes are copied into one array that the plan owns.
	arena := make([]int64, 0, dims)
	for i, s := range specs {
		if s.Name == metadataKey {
			return nil, fmt.Errorf("tensor %s: %w: reserved name", termtext.Name(s.Name), errDuplicate)
		}
		if !utf8.ValidString(s.Name) {
			return nil, fmt.Errorf("tensor %q: %w", s.Name, errHeaderUTF8)
		}
		sz, err := ByteSize(s.DType, s.Shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", termtext.Name(s.Name), err)
		}
		var shape []int64
		if s.Shape != nil {
			n := len(arena)
			arena = append(arena, s.Shape...)
			shape = arena[n:len(arena):len(arena)]
		}
		// End holds the size until the offsets are assigned.
		l.Tensors[i] = TensorInfo{Name: s.Name, DType: s.DType, Shape: shape, End: sz}
	}
	slices.SortFunc(l.Tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(b.DType, a.DType), cmp.Compare(a.Name, b.Name))
	})
	var pos int64
	for i := range l.Tensors {
		t := &l.Tensors[i]
		n := len(l.index) // a name already present leaves the length unchanged
		if l.index[t.Name] = i; len(l.index) == n {
			return nil, fmt.Errorf("tensor %s: %w", termtext.Name(t.Name), errDuplicate)
		}
		end, ok := addSize(pos, t.End)
		if !ok {
			return nil, fmt.Errorf("tensor %s: %w: the tensors' bytes add up to more than 2^63-1", termtext.Name(t.Name), errShape)
		}
		t.Begin, t.End = pos, end
		pos = end
	}
	var err error
	if l.Header, err = renderHeader(l.Tensors, metadata); err != nil {
		return nil, err
	}
	l.DataStart = int64(len(l.Header))
	var ok bool
	if l.Size, ok = addSize(l.DataStart, pos); !ok {
		return nil, fmt.Errorf("%w: the file's size exceeds 2^63-1", errShape)
	}
	return l, nil
}

// NewFilePlanSum is NewFilePlan for a planner that holds many plans: it
// returns the plan without its header bytes and their sha256.
func NewFilePlanSum(specs []TensorSpec, metadata map[string]string) (*FilePlan, [sha256.Size]byte, error) {
	l, err := NewFilePlan(specs, metadata)
	if err != nil {
		return nil, [sha256.Size]byte{}, err
	}
	sum := sha256.Sum256(l.Header)
	l.Header = nil
	return l, sum, nil
}

// renderHeader renders the prefix (length, JSON, padding) of a file holding ts.
func renderHeader(ts []TensorInfo, metadata map[string]string) ([]byte, error) {
	est := 8 + 2 + headerAlign // a little over the length, so that the buffer rarely grows
	for k, v := range metadata {
		est += len(k) + len(v) + 8
	}
	for _, t := range ts {
		est += len(t.Name) + 72 + 12*len(t.Shape)
	}
	js := appendHeaderJSON(make([]byte, 8, est), ts, metadata)
	for (len(js)-8)%headerAlign != 0 {
		js = append(js, ' ')
	}
	n := len(js) - 8
	if n > maxHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes for %d tensors", errHeaderTooLarge, n, len(ts))
	}
	binary.LittleEndian.PutUint64(js, uint64(n))
	return js, nil
}

// HeaderBytes returns the header: the kept bytes, or the same bytes rendered again.
func (l *FilePlan) HeaderBytes() ([]byte, error) {
	if l.Header != nil {
		return l.Header, nil
	}
	b, err := renderHeader(l.Tensors, l.metadata)
	if err == nil && int64(len(b)) != l.DataStart {
		err = fmt.Errorf("%w: header rendered again is %d bytes, laid out %d", ErrWrite, len(b), l.DataStart)
	}
	return b, err
}

// Index is the named tensor's position in Tensors.
func (l *FilePlan) Index(name string) (int, bool) {
	i, ok := l.index[name]
	return i, ok
}

// appendHeaderJSON renders the header as serde_json does for the reference's
// Metadata type: __metadata__ first, then tensors in data order.
func appendHeaderJSON(b []byte, ts []TensorInfo, metadata map[string]string) []byte {
	b = append(b, '{')
	if len(metadata) > 0 {
		b = appendJSONString(b, metadataKey, false)
		b = append(b, ':', '{')
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k, false)
			b = append(b, ':')
			b = appendJSONString(b, metadata[k], false)
		}
		b = append(b, '}')
	}
	for _, t := range ts {
		if b[len(b)-1] != '{' { // after __metadata__ or a tensor
			b = append(b, ',')
		}
		b = appendJSONString(b, t.Name, false)
		b = append(b, `:{"dtype":"`...)
		b = append(b, t.DType.String()...)
		b = append(b, `","shape":[`...)
		for i, d := range t.Shape {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, t.Begin, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, t.End, 10)
		b = append(b, ']', '}')
	}
	return append(b, '}')
}

// plainJSON reports whether s is written as it is in either escaping mode.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// shortEscapes maps the bytes both modes write as \x to the letter x.
var shortEscapes = [...]byte{'"': '"', '\\': '\\', '\b': 'b', '\t': 't', '\n': 'n', '\f': 'f', '\r': 'r'}

// AppendPythonJSONString appends s as Python's json.dumps writes a string by
// default (ensure_ascii): the escaping of huggingface index files and
// config.json files, so other writers of those files share this one escaper.
func AppendPythonJSONString(b []byte, s string) []byte { return appendJSONString(b, s, true) }

// appendJSONString escapes s as a JSON string: with ensureASCII false as
// serde_json does (the safetensors header: quote, backslash and control
// characters only), with ensureASCII true as Python's json.dumps default
// (huggingface index files: DEL and non-ASCII runes as \uXXXX too, astral
// runes as surrogate pairs).
func appendJSONString(b []byte, s string, ensureASCII bool) []byte {
	const hex = "0123456789abcdef"
	u4 := func(b []byte, r rune) []byte {
		return append(b, '\\', 'u', hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15])
	}
	b = append(b, '"')
	if plainJSON(s) { // every tensor name of a real checkpoint
		b = append(b, s...)
		return append(b, '"')
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case int(c) < len(shortEscapes) && shortEscapes[c] != 0:
			b = append(b, '\\', shortEscapes[c])
		case c < 0x20:
			b = u4(b, rune(c))
		case ensureASCII && c >= 0x7f:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r >= 0x10000 {
				r1, r2 := utf16.EncodeRune(r)
				b = u4(u4(b, r1), r2)
			} else {
				b = u4(b, r)
			}
			i += n
			continue
		default:
			b = append(b, c)
		}
		i++
	}
	return append(b, '"')
}
