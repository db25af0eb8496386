package safetensors

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// IndexName is the conventional name of a sharded checkpoint's index.
const IndexName = "model.safetensors.index.json"

// maxIndexSize bounds the index file read whole (Kimi-K3's is about 58 MB).
const maxIndexSize = 128 << 20

// maxIndexMetadata bounds the index's metadata object, decoded as generic JSON.
const maxIndexMetadata = 1 << 20

// Index is a model.safetensors.index.json: which shard holds each tensor.
type Index struct {
	// TotalSize is metadata.total_size: the sum of all tensors' byte sizes.
	TotalSize int64
	// WeightMap maps tensor names to shard file names relative to the index.
	WeightMap map[string]string
	// Metadata holds metadata keys other than total_size, kept for round trips.
	Metadata map[string]any
}

// indexData is a parsed index as a flat list: validated without a half-million-entry map.
type indexData struct {
	totalSize int64
	metadata  map[string]any
	files     []string // distinct shard names, sorted
	entries   []indexEntry
}

type indexEntry struct {
	name string
	file uint32 // index into files
}

// checkUnique rejects a tensor listed twice: by comparing neighbours in a
// sorted index (huggingface tooling writes them sorted), else through a map.
func (d *indexData) checkUnique(name string) error {
	sorted := true
	for i := 1; i < len(d.entries); i++ {
		a, b := d.entries[i-1].name, d.entries[i].name
		if a == b {
			return fmt.Errorf("index %s: %w: tensor %s listed twice", name, ErrIndex, termtext.Name(a))
		}
		if a > b {
			sorted = false
			break
		}
	}
	if sorted {
		return nil
	}
	_, err := d.toIndex(name)
	return err
}

func (d *indexData) toIndex(name string) (*Index, error) {
	idx := &Index{TotalSize: d.totalSize, Metadata: d.metadata, WeightMap: make(map[string]string, len(d.entries))}
	for _, e := range d.entries {
		if _, dup := idx.WeightMap[e.name]; dup {
			return nil, fmt.Errorf("index %s: %w: tensor %s listed twice", name, ErrIndex, termtext.Name(e.name))
		}
		idx.WeightMap[e.name] = d.files[e.file]
	}
	return idx, nil
}

func parseIndexData(b []byte, name string) (*indexData, error) {
	fail := func(format string, args ...any) (*indexData, error) {
		return nil, fmt.Errorf("index %s: %w: %s", name, ErrIndex, fmt.Sprintf(format, args...))
	}
	if !utf8.Valid(b) {
		return fail("not valid UTF-8")
	}
	p := newParser(b)
	d := &indexData{entries: make([]indexEntry, 0, len(b)/110)}
	seen := map[string]bool{} // metadata and weight_map, each allowed once
	seenTotal := false
	var provisional []string
	p.ws()
	if !p.at('{') {
		return fail("not a JSON object")
	}
	err := p.members('{', func(key string) error {
		if seen[key] {
			return fmt.Errorf("%s appears twice", key)
		}
		switch key {
		case "metadata":
			seen[key] = true
			start := p.i
			if err := p.skip(0); err != nil {
				return fmt.Errorf("metadata: %v", err)
			}
			if p.i-start > maxIndexMetadata {
				return fmt.Errorf("metadata is %d bytes, over the %d-byte limit", p.i-start, maxIndexMetadata)
			}
			var md map[string]any
			dec := json.NewDecoder(strings.NewReader(p.s[start:p.i]))
			dec.UseNumber()
			if err := dec.Decode(&md); err != nil {
				return fmt.Errorf("metadata: %v", err)
			}
			if v, ok := md["total_size"]; ok {
				num, ok := v.(json.Number)
				n, err := num.Int64()
				if !ok || err != nil || n < 0 {
					return fmt.Errorf("metadata.total_size %v is not a non-negative integer", v)
				}
				d.totalSize, seenTotal = n, true
				delete(md, "total_size")
			}
			if len(md) > 0 {
				d.metadata = md
			}
		case "weight_map":
			seen[key] = true
			if !p.at('{') {
				return fmt.Errorf("weight_map is not an object")
			}
			w := weightMap{entries: d.entries, ids: map[string]uint32{}}
			if !w.parallel(&p) {
				if err := p.members('{', func(t string) error { return w.entry(&p, t) }); err != nil {
					return fmt.Errorf("weight_map: %v", err)
				}
			}
			d.entries, provisional = w.entries, w.provisional
		default:
			if err := p.skip(0); err != nil {
				return fmt.Errorf("%s: %v", key, err)
			}
		}
		return nil
	})
	if err != nil {
		return fail("%v", err)
	}
	if p.ws(); p.i != len(b) {
		return fail("trailing bytes after the index object")
	}
	if !seen["weight_map"] {
		return fail("no weight_map")
	}
	if !seenTotal {
		return fail("no metadata.total_size")
	}
	// Renumber files in sorted order (two spellings of one name collapse).
	d.files = slices.Clone(provisional)
	slices.Sort(d.files)
	d.files = slices.Compact(d.files)
	remap := make([]uint32, len(provisional))
	for i, f := range provisional {
		j, _ := slices.BinarySearch(d.files, f)
		remap[i] = uint32(j)
	}
	for i := range d.entries {
		d.entries[i].file = remap[d.entries[i].file]
	}
	return d, nil
}

// checkShardName accepts only plain relative names inside the checkpoint directory.
func checkShardName(f string) error {
	switch {
	case f == "":
		return fmt.Errorf("empty shard name")
	case strings.HasPrefix(f, "/") || strings.HasPrefix(f, "\\") || (len(f) > 1 && f[1] == ':'):
		return fmt.Errorf("shard %q is an absolute path", f)
	case strings.ContainsRune(f, 0):
		return fmt.Errorf("shard %q contains NUL", f)
	case strings.IndexFunc(f, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) >= 0:
		// It would be printed in every message that names the file.
		return fmt.Errorf("shard %s holds a control character: rename the file and its index entries", termtext.Name(f))
	}
	if c := path.Clean(f); c != f || c == ".." || strings.HasPrefix(c, "../") || slices.Contains(strings.Split(f, "/"), "..") {
		return fmt.Errorf("shard %q leaves the checkpoint directory or is not clean", f)
	}
	return nil
}

// Marshal renders the index as json.dumps(index, indent=2, sort_keys=True)
// does, with no final newline (see Checkpoint.IndexNewline).
func (idx *Index) Marshal() ([]byte, error) {
	d := &indexData{totalSize: idx.TotalSize, metadata: idx.Metadata, entries: make([]indexEntry, 0, len(idx.WeightMap))}
	ids := map[string]uint32{}
	for name, f := range idx.WeightMap {
		id, ok := ids[f]
		if !ok {
			id = uint32(len(d.files))
			ids[f] = id
			d.files = append(d.files, f)
		}
		d.entries = append(d.entries, indexEntry{name, id})
	}
	var buf bytes.Buffer
	if err := d.writeTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteShardIndex streams the index of the given shards of dir (names relative
// to dir) from their headers, and returns the total size recorded.
func WriteShardIndex(w io.Writer, dir string, shards []string) (int64, error) {
	d := &indexData{files: shards}
	for i, name := range shards {
		f, err := OpenFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return 0, err
		}
		err = d.addShard(i, f.Path, f.Tensors, f.Size-f.DataStart)
		f.Close()
		if err != nil {
			return 0, err
		}
	}
	return d.totalSize, d.writeTo(w)
}

// addShard lists shard i's tensors and adds its data size to the total.
func (d *indexData) addShard(i int, path string, tensors []TensorInfo, dataSize int64) error {
	for _, t := range tensors {
		d.entries = append(d.entries, indexEntry{t.Name, uint32(i)})
	}
	total, ok := addSize(d.totalSize, dataSize)
	if !ok {
		return fmt.Errorf("file %s: %w: the shards' tensor bytes add up to more than 2^63-1", path, errFileSize)
	}
	d.totalSize = total
	return nil
}

// WriteFilePlanIndex streams the index that WriteShardIndex would render from
// the files of these layouts once written (names[i] is the file of
// layouts[i]), and returns the total size recorded.
func WriteFilePlanIndex(w io.Writer, names []string, layouts []*FilePlan) (int64, error) {
	if len(names) != len(layouts) {
		return 0, fmt.Errorf("%w: %d shard names for %d layouts", ErrWrite, len(names), len(layouts))
	}
	d := &indexData{files: names}
	n := 0
	for _, l := range layouts {
		n += len(l.Tensors)
	}
	d.entries = make([]indexEntry, 0, n)
	for i, l := range layouts {
		if err := d.addShard(i, names[i], l.Tensors, l.Size-l.DataStart); err != nil {
			return 0, err
		}
	}
	return d.totalSize, d.writeTo(w)
}

// writeTo renders json.dumps(index, indent=2, sort_keys=True) without a final
// newline, as the released Kimi-K3 index is written.
func (d *indexData) writeTo(w io.Writer) error {
	slices.SortFunc(d.entries, func(a, b indexEntry) int { return strings.Compare(a.name, b.name) })
	bw := bufio.NewWriterSize(w, 1<<20) // its errors stick until Flush
	md := map[string]any{"total_size": d.totalSize}
	for k, v := range d.metadata {
		if k != "total_size" {
			md[k] = v
		}
	}
	mdJSON, err := json.MarshalIndent(md, "  ", "  ")
	if err != nil {
		return err
	}
	bw.WriteString("{\n  \"metadata\": ")
	bw.Write(mdJSON)
	bw.WriteString(",\n  \"weight_map\": {")
	files := make([][]byte, len(d.files))
	for i, f := range d.files {
		files[i] = appendJSONString(nil, f, true)
	}
	var key []byte
	for i, e := range d.entries {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString("\n    ")
		key = appendJSONString(key[:0], e.name, true)
		bw.Write(key)
		bw.WriteString(": ")
		bw.Write(files[e.file])
	}
	if len(d.entries) > 0 {
		bw.WriteString("\n  ")
	}
	bw.WriteString("}\n}")
	return bw.Flush()
}

// WriteIndex writes an index atomically.
func WriteIndex(p string, idx *Index) error {
	for t, f := range idx.WeightMap {
		if err := checkShardName(f); err != nil {
			return fmt.Errorf("index %s: tensor %s: %w: %v", p, termtext.Name(t), ErrIndex, err)
		}
	}
	b, err := idx.Marshal()
	if err != nil {
		return fmt.Errorf("index %s: %w", p, err)
	}
	return filewrite.WriteFile(p, b, 0o644)
}
