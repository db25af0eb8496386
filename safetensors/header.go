package safetensors

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"golang.org/x/sync/semaphore"
)

// maxHeaderSize is the largest header length accepted, the reference reader's limit.
const maxHeaderSize = 100_000_000

// maxJSONDepth bounds nesting in ignored values, so a header cannot exhaust the stack.
const maxJSONDepth = 64

// maxTensorEstimate caps the tensors preallocated from a header's length.
const maxTensorEstimate = 1 << 14

// metadataKey is the reserved header key for free-form string metadata.
const metadataKey = "__metadata__"

// maxMetadataSize bounds a header's __metadata__ bytes. The reference sets no
// limit, but metadata is carried into outputs (one copy per rank of a layout).
const maxMetadataSize = 1 << 20

// maxHeaderBytesInFlight bounds the header bytes read and parsed at once in
// the process; at least maxHeaderSize, or the largest share is never granted.
const maxHeaderBytesInFlight = 256 << 20

var _ [maxHeaderBytesInFlight - maxHeaderSize]struct{}

// headerBudget holds maxHeaderBytesInFlight, taken by a header read before it allocates.
var headerBudget = semaphore.NewWeighted(maxHeaderBytesInFlight)

// ReadHeader reads and validates the header of a safetensors file of the given
// size (8 bytes, then the header, never the data); path names the file in
// errors. It rejects what the reference reader rejects, duplicate tensor
// names and metadata over maxMetadataSize.
func ReadHeader(r io.ReaderAt, size int64, path string) (*File, error) {
	return readHeader(context.Background(), r, size, path, nil, nil)
}

// readHeader is ReadHeader waiting for its share of maxHeaderBytesInFlight
// under ctx, parsing into mem's memory when given; a parse failure calls
// stop (when given).
func readHeader(ctx context.Context, r io.ReaderAt, size int64, path string, stop func(error), mem *headerMem) (*File, error) {
	fail := func(err error) (*File, error) { return nil, fmt.Errorf("file %s: %w", path, err) }
	if size < 8 {
		return fail(fmt.Errorf("%w (size %d)", errTooSmall, size))
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return fail(fmt.Errorf("read header length: %w", err))
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeaderSize {
		return fail(fmt.Errorf("%w: %d > %d", errHeaderTooLarge, n, maxHeaderSize))
	}
	if int64(n) > size-8 {
		return fail(fmt.Errorf("%w: header length %d, file size %d", errHeaderTruncated, n, size))
	}
	if err := headerBudget.Acquire(ctx, int64(n)); err != nil {
		return fail(err)
	}
	defer headerBudget.Release(int64(n))
	var buf []byte
	if mem != nil && uint64(cap(mem.buf)) >= n {
		buf = mem.buf[:n]
	} else {
		buf = make([]byte, n) // bounded by maxHeaderSize, the file size and headerBudget
		if mem != nil && n <= maxReusedHeader {
			mem.buf = buf
		}
	}
	var f *File
	_, err := io.ReadFull(io.NewSectionReader(r, 8, int64(n)), buf)
	if err != nil {
		err = fmt.Errorf("read header: %w", err)
	} else if f, err = parseHeader(buf, mem); err == nil {
		f.Size, f.DataStart = size, 8+int64(n)
		var dataEnd int64
		if len(f.Tensors) > 0 {
			dataEnd = f.Tensors[len(f.Tensors)-1].End
		}
		if dataEnd != size-f.DataStart { // no sum: End may be near the int64 limit
			err = fmt.Errorf("%w: header %d + data %d bytes ≠ file size %d", errFileSize, f.DataStart, dataEnd, size)
		}
	}
	if err != nil {
		f, err = fail(err)
		if stop != nil {
			stop(err) // before the share goes back, so that readers waiting for it see the cancellation
		}
		return f, err
	}
	f.Path = path
	f.ra = r
	return f, nil
}

// parseHeader parses b, which is not written again while the File is in use
// (names alias it). mem, when given, lends the tensor table, name map and
// shape memory, and keeps them for the next header.
func parseHeader(b []byte, mem *headerMem) (*File, error) {
	if !utf8.Valid(b) {
		return nil, errHeaderUTF8
	}
	p := newParser(b)
	f := &File{}
	est := min(len(b)/96, maxTensorEstimate) // from the length, never a count the file states
	if mem != nil && mem.tensors != nil {
		f.Tensors, f.index, p.arena = mem.tensors[:0], mem.index, mem.arena[:0]
		clear(f.index)
	} else {
		f.Tensors = make([]TensorInfo, 0, est)
		f.index = make(map[string]int32, est)
	}
	p.ws()
	if !p.at('{') {
		return nil, p.errf(errHeaderJSON, "header does not start with '{'")
	}
	err := p.members('{', func(name string) error {
		if name == metadataKey {
			if f.Metadata != nil {
				return fmt.Errorf("%w: %s", errDuplicate, metadataKey)
			}
			var err error
			f.Metadata, err = p.metadata()
			return err
		}
		t, err := p.tensor(name)
		if err != nil {
			return fmt.Errorf("tensor %s: %w", termtext.Name(name), err)
		}
		n := len(f.index) // a name already present leaves the length unchanged
		f.index[name] = int32(len(f.Tensors))
		if len(f.index) == n {
			return fmt.Errorf("tensor %s: %w", termtext.Name(name), errDuplicate)
		}
		f.Tensors = append(f.Tensors, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, p.errf(errHeaderJSON, "trailing bytes after the header object")
	}
	if f.Metadata != nil && len(f.Metadata) == 0 {
		f.Metadata = nil
	}
	if err := f.validateOffsets(); err != nil {
		return nil, err
	}
	f.raw = b
	f.compactNames(len(b))
	if mem != nil && len(b) <= maxReusedHeader {
		mem.tensors, mem.index = f.Tensors, f.index
		if cap(mem.arena) < p.dims {
			mem.arena = make([]int64, 0, p.dims) // for the next header: one chunk
		}
	}
	return f, nil
}

// headerMem is the memory a transient walk reuses from one header to the next.
type headerMem struct {
	buf     []byte
	tensors []TensorInfo
	index   map[string]int32
	arena   []int64
}

// maxReusedHeader bounds the headers whose memory is kept for the next one.
const maxReusedHeader = 16 << 20

// compactNames copies the tensor names out of a large header they are a small
// part of, so that a File keeps its names alive, not its padding.
func (f *File) compactNames(headerLen int) {
	if headerLen < 1<<20 {
		return
	}
	total := 0
	for _, t := range f.Tensors {
		total += len(t.Name)
	}
	if total > headerLen/2 {
		return
	}
	var sb strings.Builder
	sb.Grow(total)
	for _, t := range f.Tensors {
		sb.WriteString(t.Name)
	}
	sum := f.sumRaw()
	f.rawSum, f.raw = &sum, nil
	all, pos := sb.String(), 0
	for i := range f.Tensors {
		n := len(f.Tensors[i].Name)
		f.Tensors[i].Name = all[pos : pos+n]
		pos += n
	}
	for k, v := range f.Metadata { // small (maxMetadataSize) but aliasing the header
		delete(f.Metadata, k)
		f.Metadata[strings.Clone(k)] = strings.Clone(v)
	}
	// The index map's keys alias the header too.
	clear(f.index)
	for i, t := range f.Tensors {
		f.index[t.Name] = int32(i)
	}
}

// HeaderSum returns the sha256 of the file's first DataStart bytes as they
// were read and parsed; ok is false for a File not read from a file.
func (f *File) HeaderSum() (sum [sha256.Size]byte, ok bool) {
	switch {
	case f.rawSum != nil:
		return *f.rawSum, true
	case f.raw != nil:
		return f.sumRaw(), true
	}
	return sum, false
}

// sumRaw hashes the length prefix and the header bytes.
func (f *File) sumRaw() [sha256.Size]byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(f.raw)))
	h := sha256.New()
	h.Write(n[:])
	h.Write(f.raw)
	return [sha256.Size]byte(h.Sum(nil))
}

// validateOffsets sorts the tensors by data offsets and checks, as the
// reference does, that they tile [0, end), each exactly shape × dtype bytes.
func (f *File) validateOffsets() error {
	if !slices.IsSortedFunc(f.Tensors, cmpOffsets) {
		slices.SortStableFunc(f.Tensors, cmpOffsets)
		for i, t := range f.Tensors {
			f.index[t.Name] = int32(i)
		}
	}
	var pos int64
	for _, t := range f.Tensors {
		if t.Begin != pos || t.End < t.Begin {
			return fmt.Errorf("tensor %s: %w: data_offsets [%d, %d], expected start %d", termtext.Name(t.Name), errOffsets, t.Begin, t.End, pos)
		}
		want, err := ByteSize(t.DType, t.Shape)
		if err != nil {
			return fmt.Errorf("tensor %s: %w", termtext.Name(t.Name), err)
		}
		if t.End-t.Begin != want {
			return fmt.Errorf("tensor %s: %w: %d bytes for %s %v (want %d)", termtext.Name(t.Name), ErrSizeMismatch, t.End-t.Begin, t.DType, t.Shape, want)
		}
		pos = t.End
	}
	return nil
}

func cmpOffsets(a, b TensorInfo) int {
	return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End))
}

// tensor parses one tensor entry: an object with dtype, shape and data_offsets;
// unknown fields are skipped as the reference's deserializer does.
func (p *parser) tensor(name string) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	if !p.at('{') {
		return t, p.errf(errHeaderJSON, "entry is not an object")
	}
	const hasDType, hasShape, hasOffsets = 1, 2, 4
	seen := 0
	err := p.members('{', func(key string) error {
		bit := 0
		switch key {
		case "dtype":
			bit = hasDType
			raw, esc, err := p.rawStr()
			if err != nil {
				return fmt.Errorf("dtype: %w", err)
			}
			if d, ok := dtypeByName[string(raw)]; ok && !esc { // no allocation on the common path
				t.DType = d
				break
			}
			ds := string(raw)
			if esc {
				if ds, err = p.unescape(raw); err != nil {
					return err
				}
			}
			if t.DType, err = parseDType(ds); err != nil {
				return err
			}
		case "shape":
			bit = hasShape
			dims, err := p.uintArray(errShape, "shape", p.scratch[:0])
			if err != nil {
				return err
			}
			t.Shape = p.carve(dims)
		case "data_offsets":
			bit = hasOffsets
			var buf [2]int64
			offs, err := p.uintArray(errOffsets, "data_offsets", buf[:0])
			if err != nil {
				return err
			}
			if len(offs) != 2 {
				return p.errf(errOffsets, "data_offsets has %d entries, want 2", len(offs))
			}
			t.Begin, t.End = offs[0], offs[1]
		default:
			return p.skip(0)
		}
		if seen&bit != 0 {
			return p.errf(errHeaderJSON, "duplicate field %q", key)
		}
		seen |= bit
		return nil
	})
	if err != nil {
		return t, err
	}
	for i, field := range [...]string{"dtype", "shape", "data_offsets"} { // hasDType, hasShape, hasOffsets
		if seen&(1<<i) == 0 {
			return t, fmt.Errorf("%w: %s", errMissingField, field)
		}
	}
	return t, nil
}

// carve copies dims into the shape arena (one allocation per thousand tensors).
func (p *parser) carve(dims []int64) []int64 {
	if cap(p.arena)-len(p.arena) < len(dims) {
		p.arena = make([]int64, 0, max(4096, len(dims)))
	}
	start := len(p.arena)
	p.arena = append(p.arena, dims...)
	p.dims += len(dims)
	return p.arena[start:len(p.arena):len(p.arena)]
}

func (p *parser) metadata() (map[string]string, error) {
	m := map[string]string{}
	if p.lit("null") {
		return m, nil
	}
	if !p.at('{') {
		return nil, p.errf(errMetadata, "not an object")
	}
	total := 0
	err := p.members('{', func(k string) error {
		if !p.at('"') {
			return p.errf(errMetadata, "value of %s is not a string", termtext.Name(k))
		}
		v, err := p.str()
		if err != nil {
			return err
		}
		if _, dup := m[k]; dup {
			return p.errf(errMetadata, "duplicate key %s", termtext.Name(k))
		}
		if total += len(k) + len(v); total > maxMetadataSize {
			return p.errf(errMetadata, "more than %d bytes of metadata (the limit)", maxMetadataSize)
		}
		m[k] = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}
