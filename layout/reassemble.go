package layout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/k3ckpt/k3ckpt/internal/atomicfile"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// ErrMismatch: a rebuilt tensor whose bytes differ from the source's.
var ErrMismatch = errors.New("tensor bytes differ")

// ReassembleOptions controls Reassemble.
type ReassembleOptions struct {
	// Jobs bounds how many files are written at once (0: GOMAXPROCS, at
	// least DefaultJobs); written files wait for fsync apart from the writers.
	Jobs int
	// Force replaces the content of an existing output directory.
	Force bool
	// Progress, if set, is called with bytes written.
	Progress func(n int64)
}

// ReassembleResult summarizes a reassembly.
type ReassembleResult struct {
	// Files is the number of shards written.
	Files int
	// Bytes is the tensor bytes written.
	Bytes int64
	// Missing names the source tensors the export's layout dropped; files
	// that held them cannot be byte-identical to the source.
	Missing []string
}

// Reassemble rebuilds the source checkpoint from an export (rank-NN or
// stage-NN directories with manifests): every source shard with its
// tensors, metadata and canonical layout, the index and the side files. For
// a lossless export the shards are byte-identical to the source's.
func Reassemble(ctx context.Context, exportDir, out string, o ReassembleOptions) (*ReassembleResult, error) {
	src, err := OpenSource(exportDir)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if src.exportM == nil {
		return nil, fmt.Errorf("%w: %s has no rank-NN or stage-NN directories with %s", ErrManifest, exportDir, ManifestName)
	}
	byFile := map[string]*outFile{}
	for i, spec := range src.Specs {
		sf := src.FileOf[i]
		of, ok := byFile[sf]
		if !ok {
			if !filepath.IsLocal(sf) {
				return nil, fmt.Errorf("%w: source file %q leaves the output directory", ErrManifest, sf)
			}
			of = &outFile{name: sf, path: filepath.Join(out, sf), meta: fileMeta(src, sf)}
			byFile[sf] = of
		}
		of.tensors = append(of.tensors, outTensor{spec: spec, src: src.data[i], shape: spec.Shape, held: HeldReplica})
	}
	res := &ReassembleResult{Missing: src.Missing}
	idx := &safetensors.Index{WeightMap: map[string]string{}, Metadata: src.Info.IndexMetadata}
	var files []*outFile
	for _, sf := range src.Info.Files {
		of, ok := byFile[sf.Name]
		if !ok {
			continue
		}
		if err := of.planSteps(); err != nil {
			return nil, err
		}
		for _, t := range of.tensors {
			n, _ := safetensors.ByteSize(t.spec.DType, t.spec.Shape)
			idx.TotalSize += n
			idx.WeightMap[t.spec.Name] = of.name
		}
		res.Files++
		files = append(files, of)
	}
	if err := prepareOut(out, o.Force); err != nil {
		return nil, err
	}
	if res.Bytes, err = writeFiles(ctx, files, o.Jobs, o.Progress, nil); err != nil {
		return nil, err
	}
	for name, b := range src.aux {
		if err := atomicfile.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	if err := safetensors.WriteIndex(filepath.Join(out, safetensors.IndexName), idx); err != nil {
		return nil, err
	}
	return res, nil
}

// Compare checks that every tensor of b exists in a with the same dtype,
// shape and bytes, reading both with bounded buffers. It returns the number
// of bytes compared.
func Compare(ctx context.Context, a, b *Source) (int64, error) {
	at := map[string]int{}
	for i, s := range a.Specs {
		at[s.Name] = i
	}
	bufA, bufB := make([]byte, WindowSize), make([]byte, WindowSize)
	var total int64
	for j, s := range b.Specs {
		i, ok := at[s.Name]
		if !ok {
			return total, fmt.Errorf("%w: tensor %s of %s is not in %s", ErrMismatch, s.Name, b.Root, a.Root)
		}
		sa := a.Specs[i]
		if sa.DType != s.DType || !equalShape(sa.Shape, s.Shape) {
			return total, fmt.Errorf("%w: tensor %s: %s %v in %s, %s %v in %s", ErrMismatch, s.Name, sa.DType, sa.Shape, a.Root, s.DType, s.Shape, b.Root)
		}
		size, err := safetensors.ByteSize(s.DType, s.Shape)
		if err != nil {
			return total, err
		}
		for off := int64(0); off < size; {
			if err := ctx.Err(); err != nil {
				return total, err
			}
			n := min(int64(len(bufA)), size-off)
			if err := readFull(a.data[i], bufA[:n], off); err != nil {
				return total, fmt.Errorf("%s: tensor %s: %w", a.Root, s.Name, err)
			}
			if err := readFull(b.data[j], bufB[:n], off); err != nil {
				return total, fmt.Errorf("%s: tensor %s: %w", b.Root, s.Name, err)
			}
			if !bytes.Equal(bufA[:n], bufB[:n]) {
				k := 0
				for bufA[k] == bufB[k] {
					k++
				}
				return total, fmt.Errorf("%w: tensor %s: first difference at byte %d", ErrMismatch, s.Name, off+int64(k))
			}
			off += n
			total += n
		}
	}
	return total, nil
}
