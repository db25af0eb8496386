package layout

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// PlanReassemble plans rebuilding the source checkpoint from an export
// source: every source shard under its own name, the index and the side
// files, in one directory ("."). For a lossless export the shards are
// byte-identical to the source's; the tensors dropped are listed in Dropped.
func PlanReassemble(src *Source) (*Plan, error) {
	if src.files != nil {
		return nil, fmt.Errorf("%w: %s has no rank-NN or stage-NN directories with %s", errManifest, src.Root, manifestName)
	}
	byFile := map[string]*outFile{}
	for i, spec := range src.Specs {
		sf := src.fileOf[i]
		of, ok := byFile[sf]
		if !ok {
			if !filepath.IsLocal(sf) || filepath.Base(sf) != sf {
				return nil, fmt.Errorf("%w: %s: source file %q is not a plain name in the output directory", errManifest, src.Root, sf)
			}
			of = &outFile{name: sf, meta: fileMeta(src, sf)}
			byFile[sf] = of
		}
		of.tensors = append(of.tensors, outTensor{spec: spec, src: src.data[i], shape: spec.Shape, held: heldReplica})
	}
	d := dirPlan{Dir: ".", Rank: -1, Stage: -1, side: src.aux, indexNewline: !src.info.IndexNoFinalNewline}
	for _, f := range src.info.Files {
		of, ok := byFile[f.Name]
		if !ok {
			continue
		}
		if err := of.plan(); err != nil {
			return nil, err
		}
		d.files = append(d.files, of)
	}
	d.index = indexOf(d.files, src.info.IndexMetadata)
	dropped, err := droppedBytes(src)
	if err != nil {
		return nil, err
	}
	p := &Plan{Op: opReassemble, Source: src.Root, Dirs: []dirPlan{d}, Dropped: src.missing, DroppedBytes: dropped, src: src}
	p.describe()
	return p, nil
}

func droppedBytes(src *Source) (int64, error) {
	held := int64(0)
	for _, s := range src.Specs {
		n, err := safetensors.ByteSize(s.DType, s.Shape)
		if err != nil {
			return 0, err
		}
		held += n
	}
	if d := src.info.TotalSize - held; d >= 0 && (d > 0) == (len(src.missing) > 0) {
		return d, nil
	}
	return 0, fmt.Errorf("%w: %s: the source's total_size %d and the %d bytes of tensors held disagree with %d tensors dropped",
		errManifest, src.Root, src.info.TotalSize, held, len(src.missing))
}

func fileMeta(src *Source, name string) map[string]string {
	for _, f := range src.info.Files {
		if f.Name == name {
			return f.Metadata
		}
	}
	return nil
}

// Compare checks that every tensor of b exists in a with the same dtype,
// shape and bytes, reading both with bounded buffers (a remote source
// through one coalescing stream). It returns the number of bytes compared.
func Compare(ctx context.Context, a, b *Source) (int64, error) {
	at := map[string]int{}
	for i, s := range a.Specs {
		at[s.Name] = i
	}
	var orderA, orderB []int
	for j, s := range b.Specs {
		if i, ok := at[s.Name]; ok {
			orderA, orderB = append(orderA, i), append(orderB, j)
		}
	}
	dataA, closeA := a.streamTensors(ctx, orderA)
	defer closeA()
	dataB, closeB := b.streamTensors(ctx, orderB)
	defer closeB()
	bufA, bufB := make([]byte, windowSize), make([]byte, windowSize)
	var total int64
	for j, s := range b.Specs {
		i, ok := at[s.Name]
		if !ok {
			return total, fmt.Errorf("%w: tensor %s of %s is not in %s", errMismatch, s.Name, b.Root, a.Root)
		}
		sa := a.Specs[i]
		if sa.DType != s.DType || !slices.Equal(sa.Shape, s.Shape) {
			return total, fmt.Errorf("%w: tensor %s: %s %v in %s, %s %v in %s", errMismatch, s.Name, sa.DType, sa.Shape, a.Root, s.DType, s.Shape, b.Root)
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
			if err := readFull(dataA[i], bufA[:n], off); err != nil {
				return total, fmt.Errorf("%s: tensor %s: %w", a.Root, s.Name, err)
			}
			if err := readFull(dataB[j], bufB[:n], off); err != nil {
				return total, fmt.Errorf("%s: tensor %s: %w", b.Root, s.Name, err)
			}
			if !bytes.Equal(bufA[:n], bufB[:n]) {
				k := 0
				for bufA[k] == bufB[k] {
					k++
				}
				return total, fmt.Errorf("%w: tensor %s: first difference at byte %d", errMismatch, s.Name, off+int64(k))
			}
			off += n
			total += n
		}
	}
	if err := closeA(); err != nil {
		return total, fmt.Errorf("%s: %w", a.Root, err)
	}
	if err := closeB(); err != nil {
		return total, fmt.Errorf("%s: %w", b.Root, err)
	}
	return total, nil
}
