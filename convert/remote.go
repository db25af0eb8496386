package convert

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// A remote source (https://, hf://) is converted as a local one, except that
// the bytes each output shard needs are fetched by one coalescing, parallel
// stream in the order its steps read them; a source file's identity is its
// size and version (which every response must repeat), not its stamp; and
// side files come from the hub's listing.

// netCounter adds up, over a run's jobs, the source bytes fetched and their cost.
type netCounter struct {
	mu  sync.Mutex
	sum remote.Stats
}

func (c *netCounter) add(st remote.Stats) {
	c.mu.Lock()
	c.sum = c.sum.Add(st)
	c.mu.Unlock()
}

func (c *netCounter) stats() *remote.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sum
	return &s
}

// sourceVersion identifies a remote source file between runs: its size and
// remote.File.Version (ETag, Last-Modified or commit; "" when none).
type sourceVersion struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	ETag string `json:"etag"`
}

func (p *Plan) sourceVersions() []sourceVersion {
	if p.remote == nil {
		return nil
	}
	var vs []sourceVersion
	for _, f := range p.Files {
		vs = append(vs, sourceVersion{Name: f.Name, Size: f.Source.Size, ETag: f.etag})
	}
	return vs
}

// checkVersions refuses to resume a run whose remote source files are no
// longer the ones it started from: finished outputs would mix two versions.
func checkVersions(dst string, st *planState, p *Plan) error {
	for _, v := range p.sourceVersions() {
		i := slices.IndexFunc(st.Sources, func(w sourceVersion) bool { return w.Name == v.Name })
		if i >= 0 && st.Sources[i] != v {
			w := st.Sources[i]
			return fmt.Errorf("%w: source file %s is not the one this conversion in %s started from (size %d, ETag %s; now %d, %s); pass --restart to convert the new version",
				errChanged, v.Name, dst, w.Size, w.ETag, v.Size, v.ETag)
		}
	}
	return nil
}

// listRemoteAux lists a remote checkpoint's side files with the rules of
// listAux. An https:// directory cannot be listed: unlisted says so.
func listRemoteAux(ctx context.Context, src *safetensors.Checkpoint) (aux []auxFile, unlisted bool, err error) {
	files, err := src.Remote.List(ctx)
	if errors.Is(err, remote.ErrNotListable) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("list side files of %s: %w", src.Root, err)
	}
	for _, f := range files {
		shard := slices.ContainsFunc(src.Files, func(sf *safetensors.File) bool { return sf.Path == f.Name })
		if shard || !model.IsSideFileName(f.Name) || replacedNames[f.Name] {
			continue
		}
		if !strings.Contains(f.Name, "/") && strings.HasSuffix(f.Name, ".safetensors") {
			return nil, false, fmt.Errorf("%w: %s%s is not among the shards planned (%d, from %s); convert the whole repository",
				errPartialSource, src.Root, f.Name, len(src.Files), sourceDesc(src))
		}
		if f.Size > safetensors.MaxAuxSize {
			return nil, false, fmt.Errorf("side file %s%s: %d bytes (limit %d)", src.Root, f.Name, f.Size, safetensors.MaxAuxSize)
		}
		aux = append(aux, auxFile{Name: f.Name, Size: f.Size})
	}
	slices.SortFunc(aux, func(a, b auxFile) int { return strings.Compare(a.Name, b.Name) })
	return aux, false, nil
}

// fileRanges are the source bytes a shard's steps read, in the order they
// read them (a weight whose codes are neither held nor spilled twice).
func fileRanges(fp *filePlan) []remote.Range {
	var rs []remote.Range
	sf := fp.Source
	seen := map[string]bool{} // the K_max already scanned
	read := func(t safetensors.TensorInfo, off, n int64) {
		rs = append(rs, remote.Range{File: sf.Path, Off: sf.DataStart + t.Begin + off, Len: n})
	}
	for _, st := range fp.Steps {
		switch {
		case st.Kind == stepNVFP4:
			nvfp4Reads(st, seen, read)
		case st.Kind == stepCopy:
			rs = append(rs, remote.Range{File: sf.Path, Off: st.Src, Len: st.Len})
		case (st.Kind == stepDecode || st.Kind == stepPack) && st.xf != nil:
			xfReads(st.xf, read)
		case (st.Kind == stepScales || st.Kind == stepCodes && !st.HoldCodes && !st.SpillCodes) && isMXFP4Codes(st.Source):
			mxfp4Reads(sf, st.Source, read)
		case st.Kind == stepScales, st.Kind == stepCodes && !st.HoldCodes && !st.SpillCodes:
			quantReads(st.Source, func(off, n int64) { read(st.Source, off, n) })
		}
	}
	return rs
}

// quantReads calls read with each (offset in the tensor, length) quantize
// reads, in its order: whole 128-row bands, or a band's rows tile by tile.
func quantReads(t safetensors.TensorInfo, read func(off, n int64)) {
	elem, ok := quantElems[t.DType]
	if !ok || len(t.Shape) != 2 {
		return // quantize fails before reading
	}
	n, k, esz := t.Shape[0], int(t.Shape[1]), elem.Size()
	rowBytes := int64(k) * int64(esz)
	wcols := tileCols(k, esz)
	if wcols >= k {
		read(0, n*rowBytes)
		return
	}
	for b := range blocks(n) {
		rows := min(blockSize, n-b*blockSize)
		for c0 := 0; c0 < k; c0 += wcols {
			w := min(wcols, k-c0)
			for r := range rows {
				read((b*blockSize+r)*rowBytes+int64(c0*esz), int64(w*esz))
			}
		}
	}
}

// sourceReader is where a shard's steps read the source: a stream of its
// planned ranges for a remote source, else the file; done ends the stream.
func (s *scratch) sourceReader(ctx context.Context, p *Plan, fp *filePlan) (io.ReaderAt, func() error) {
	if p.remote == nil {
		return fp.Source.ReaderAt(), func() error { return nil }
	}
	st := p.remote.Stream(ctx, fileRanges(fp), remote.FetchOptions{Connections: s.conns})
	return st.File(fp.Source.Path), func() error {
		stats, err := st.Close()
		if s.net != nil {
			s.net.add(stats)
		}
		return err
	}
}

// fetchBytes sums the remote source's planned ranges and side files.
func (p *Plan) fetchBytes() int64 {
	if p.remote == nil {
		return 0
	}
	var n int64
	for _, fp := range p.Files {
		n += remote.Needed(fileRanges(fp))
	}
	for _, a := range p.Aux {
		n += a.Size
	}
	return n
}

// hashSourceAux hashes a side file of the source (verify's comparison); root
// resolves a local source's names.
func hashSourceAux(ctx context.Context, p *Plan, root *fsx.Root, a auxFile) (fileRecord, error) {
	if p.remote == nil {
		real, err := root.Resolve(a.Name)
		if err != nil {
			return fileRecord{}, err
		}
		return hashFile(real, nil)
	}
	f, err := p.remote.Open(ctx, a.Name)
	h := sha256.New()
	var n int64
	if err == nil {
		n, err = io.Copy(h, io.NewSectionReader(f, 0, f.Size()))
	}
	if err != nil {
		return fileRecord{}, fmt.Errorf("%s%s: %w", p.SrcRoot, a.Name, err)
	}
	return fileRecord{Name: a.Name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
