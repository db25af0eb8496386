package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

const (
	manifestName    = "layout.json" // the per-rank (per-stage) manifest of an export
	manifestFormat  = "k3ckpt-layout/1"
	maxManifestSize = 256 << 20 // a manifest read whole
)

// Output directory prefixes: stage-NN for pipeline stages of one rank each,
// rank-NN otherwise.
const (
	rankDirPrefix  = "rank-"
	stageDirPrefix = "stage-"
)

// packedScale describes a block scale stored in the DeepGEMM SM100 packed
// UE8M0 layout ("ue8m0") instead of its source F32 form: the [start, stop)
// weight rows (one packed row each) and block columns it covers, and its
// int32 shape [⌈cols/4⌉, align(rows, 4)].
type packedScale struct {
	Format string   `json:"format"`
	Rows   [2]int64 `json:"rows"`
	Cols   [2]int64 `json:"cols"`
	Shape  []int64  `json:"shape"`
}

// entry is one tensor (or slice) a rank holds, as recorded in its manifest:
// the source tensor's name (also its name in the rank's File), source shard,
// dtype and shape, how it is held, and the rule that placed it.
type entry struct {
	Name       string            `json:"name"`
	File       string            `json:"file"`
	SourceFile string            `json:"source_file"`
	DType      safetensors.DType `json:"dtype"`
	Shape      []int64           `json:"shape"`
	Held       held              `json:"held"`
	// Axis, Start and Stop give a slice (Held "slice").
	Axis  int   `json:"axis,omitempty"`
	Start int64 `json:"start,omitempty"`
	Stop  int64 `json:"stop,omitempty"`
	// Valid, when set, is how many entries along Axis are real; the layout
	// dropped the rest, zero padding the export verified.
	Valid int64  `json:"valid,omitempty"`
	Rule  string `json:"rule"`
	// ScaleOf names the block-FP8 weight this scale belongs to.
	ScaleOf string       `json:"scale_of,omitempty"`
	Scale   scaleMode    `json:"scale,omitempty"`
	Packed  *packedScale `json:"packed,omitempty"`
}

// manifest is layout.json: what one rank (or stage) directory holds and how
// each piece maps onto the source checkpoint.
type manifest struct {
	Format string  `json:"format"` // manifestFormat
	Layout *Layout `json:"layout"` // the complete layout the export followed
	Rank   int     `json:"rank"`
	Ranks  int     `json:"ranks"`
	Stage  int     `json:"stage"`
	Stages int     `json:"stages"`
	Layers [2]int  `json:"layers"` // the stage's [first, end)
	// SourceFiles are the source shards this rank had to open.
	SourceFiles []string `json:"source_files"`
	PackScales  string   `json:"pack_scales,omitempty"`
	// Loader says who can read the directory (a loader that knows this
	// layout), so an engine pointed at it by mistake is told why.
	Loader       string     `json:"loader"`
	Source       sourceInfo `json:"source"`
	SourceConfig string     `json:"source_config,omitempty"` // config.json, byte for byte
	// Dropped names the source tensors the layout leaves out everywhere.
	Dropped []string `json:"dropped,omitempty"`
	Tensors []entry  `json:"tensors"`
}

func loaderNote(packed bool) string {
	const note = "input for a loader that knows this layout (e.g. a modified SGLang that reads per-rank or per-stage directories); " +
		"stock engines' ShardedStateLoader reads only files written by their own save_sharded_state"
	if packed {
		return note + "; block scales are packed int32 UE8M0 in DeepGEMM's SM100 layout, which no stock engine reads from a checkpoint"
	}
	return note
}

func readManifest(dir string) (*manifest, error) {
	path := filepath.Join(dir, manifestName)
	b, err := fsx.ReadFile(path, maxManifestSize)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errManifest, err)
	}
	var m manifest
	if err := decodeStrict(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errManifest, path, err)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("%w: %s: format %q, want %q", errManifest, path, m.Format, manifestFormat)
	}
	if m.Layout == nil {
		return nil, fmt.Errorf("%w: %s: no layout", errManifest, path)
	}
	if _, err := m.Layout.compile(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m.Rank < 0 || m.Rank >= m.Ranks || m.Ranks != m.Layout.ranks() {
		return nil, fmt.Errorf("%w: %s: rank %d of %d (layout has %d)", errManifest, path, m.Rank, m.Ranks, m.Layout.ranks())
	}
	seen := make(map[string]bool, len(m.Source.Files))
	for _, f := range m.Source.Files {
		if seen[f.Name] {
			return nil, fmt.Errorf("%w: %s: source file %s is listed twice in source.files; the manifest was edited or damaged: export again", errManifest, path, termtext.Name(f.Name))
		}
		seen[f.Name] = true
	}
	for _, e := range m.Tensors {
		if !filepath.IsLocal(e.File) || filepath.Base(e.File) != e.File {
			return nil, fmt.Errorf("%w: %s: tensor %s: file %q is not a plain name in the directory", errManifest, path, e.Name, e.File)
		}
	}
	return &m, nil
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// files names the directory's safetensors files, as its entries give them,
// sorted.
func (m *manifest) files() []string {
	var out []string
	for _, e := range m.Tensors {
		out = append(out, e.File)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// marshal writes the manifest indented, but each tensor entry compact on its
// own line: tens of thousands of entries stay greppable and fast to encode.
func (m *manifest) marshal() ([]byte, error) {
	head := *m
	head.Tensors = nil
	b, err := encodeJSON(&head)
	if err != nil {
		return nil, err
	}
	const tail = "\"tensors\": null\n}\n"
	if !bytes.HasSuffix(b, []byte(tail)) {
		return nil, fmt.Errorf("manifest encoding: unexpected tail %q", b[max(0, len(b)-40):])
	}
	buf := bytes.NewBuffer(append(b[:len(b)-len(tail)], "\"tensors\": ["...))
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	for i := range m.Tensors {
		buf.WriteString("\n    ")
		if err := enc.Encode(&m.Tensors[i]); err != nil {
			return nil, err
		}
		buf.Truncate(buf.Len() - 1)
		if i < len(m.Tensors)-1 {
			buf.WriteByte(',')
		}
	}
	buf.WriteString("\n  ]\n}\n")
	return buf.Bytes(), nil
}

// encodeJSON encodes indented by two spaces, without HTML escaping
// (patterns hold '<' and '>'); the result ends in a newline.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
