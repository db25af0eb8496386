package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// manifestName is the per-rank (per-stage) manifest of an export.
const manifestName = "layout.json"

// manifestFormat versions the manifest schema.
const manifestFormat = "k3ckpt-layout/1"

// maxManifestSize bounds a manifest read whole (a pp8-tp8 rank of the
// full checkpoint lists ~60k entries, about 20 MB).
const maxManifestSize = 256 << 20

// Output directory prefixes: stage-NN for pipeline stages of one rank each,
// rank-NN otherwise.
const (
	rankDirPrefix  = "rank-"
	stageDirPrefix = "stage-"
)

// packedScale describes a block scale stored in the DeepGEMM SM100 packed UE8M0
// layout instead of its source F32 form.
type packedScale struct {
	// Format is "ue8m0".
	Format string `json:"format"`
	// Rows is the [start, stop) range of weight rows the packed scale
	// covers: one packed row per weight row.
	Rows [2]int64 `json:"rows"`
	// Cols is the [start, stop) range of block columns (⌈K/128⌉) it covers.
	Cols [2]int64 `json:"cols"`
	// Shape is the stored int32 shape [⌈cols/4⌉, align(rows, 4)].
	Shape []int64 `json:"shape"`
}

// entry is one tensor (or slice) a rank holds, as recorded in its manifest.
type entry struct {
	// Name is the source tensor name, also its name in the rank's file.
	Name string `json:"name"`
	// File is the rank's safetensors file holding it.
	File string `json:"file"`
	// SourceFile is the source shard it came from.
	SourceFile string `json:"source_file"`
	// DType and Shape are the source tensor's.
	DType safetensors.DType `json:"dtype"`
	Shape []int64           `json:"shape"`
	// Held says whether this is a replica, a slice or an expert's tensor.
	Held held `json:"held"`
	// Axis, Start and Stop give a slice (Held "slice").
	Axis  int   `json:"axis,omitempty"`
	Start int64 `json:"start,omitempty"`
	Stop  int64 `json:"stop,omitempty"`
	// Valid, when set, is how many entries along Axis are real; the layout
	// dropped the rest, zero padding the export verified.
	Valid int64 `json:"valid,omitempty"`
	// Rule is the layout rule that placed the tensor.
	Rule string `json:"rule"`
	// ScaleOf names the block-FP8 weight this scale belongs to.
	ScaleOf string `json:"scale_of,omitempty"`
	// Scale says how the scale follows its weight ("follow", "replicated").
	Scale scaleMode `json:"scale,omitempty"`
	// Packed is set when the scale is stored packed.
	Packed *packedScale `json:"packed,omitempty"`
}

// manifest is layout.json: what one rank (or stage) directory holds and how
// each piece maps onto the source checkpoint.
type manifest struct {
	// Format is ManifestFormat.
	Format string `json:"format"`
	// Layout is the complete layout definition the export followed.
	Layout *Layout `json:"layout"`
	// Rank and Ranks place this directory in the world.
	Rank  int `json:"rank"`
	Ranks int `json:"ranks"`
	// Stage, Stages and Layers give the pipeline stage and its [first, end) layers.
	Stage  int    `json:"stage"`
	Stages int    `json:"stages"`
	Layers [2]int `json:"layers"`
	// SourceFiles are the source shards this rank had to open.
	SourceFiles []string `json:"source_files"`
	// PackScales is "ue8m0" when block scales are stored packed.
	PackScales string `json:"pack_scales,omitempty"`
	// Loader says who can read the directory: a per-rank directory is input
	// for a loader that knows this layout (stock engines' sharded-state
	// loaders read only files they wrote themselves, and none reads packed
	// int32 scales), so an engine pointed at it by mistake is told why.
	Loader string `json:"loader"`
	// Source describes the original checkpoint, for reassembly.
	Source sourceInfo `json:"source"`
	// SourceConfig is the original config.json, byte for byte.
	SourceConfig string `json:"source_config,omitempty"`
	// Dropped names the source tensors the layout leaves out everywhere.
	Dropped []string `json:"dropped,omitempty"`
	// Tensors lists the rank's pieces.
	Tensors []entry `json:"tensors"`
}

// loaderNote is a manifest's Loader for a directory with or without packed scales.
func loaderNote(packed bool) string {
	const note = "input for a loader that knows this layout (e.g. a modified SGLang that reads per-rank or per-stage directories); " +
		"stock engines' ShardedStateLoader reads only files written by their own save_sharded_state"
	if packed {
		return note + "; block scales are packed int32 UE8M0 in DeepGEMM's SM100 layout, which no stock engine reads from a checkpoint"
	}
	return note
}

// readManifest reads and checks dir/layout.json.
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

// decodeStrict decodes the JSON b into v, rejecting unknown fields.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// files names the directory's safetensors files, as its entries give them.
func (m *manifest) files() []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range m.Tensors {
		if !seen[e.File] {
			seen[e.File] = true
			out = append(out, e.File)
		}
	}
	return out
}

// marshal writes the manifest indented, but each tensor entry compact on its
// own line: a full-size rank lists tens of thousands of entries, which stay
// greppable and take a fraction of the time to encode.
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
	// One encoder for every entry: each Encode appends the entry and a
	// newline, which becomes the separator.
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
