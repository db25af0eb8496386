package layout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// netFetch streams a remote source's bytes (https://, hf://) to the
// writers: each output file's source bytes, in the order its steps read
// them, come from one Stream, so an export of one rank fetches that rank's
// bytes only. It adds up what the streams read and cost.
type netFetch struct {
	src   *remote.Source
	conns int
	mu    sync.Mutex // guards sum while files are written
	sum   remote.Stats
}

// readRemoteAux reads a remote checkpoint's side files: those of the hub's
// listing, by readAux's rule. An https:// directory cannot be listed: only
// config.json is read, and unlisted says so.
func readRemoteAux(c *safetensors.Checkpoint) (aux map[string][]byte, unlisted bool, err error) {
	names := []string{model.ConfigName}
	files, err := c.Remote.List(context.Background())
	switch {
	case errors.Is(err, remote.ErrNotListable):
		unlisted = true
	case err != nil:
		return nil, false, fmt.Errorf("list side files of %s: %w", c.Root, err)
	default:
		shards := map[string]bool{}
		for _, f := range c.Files {
			shards[f.Path] = true
		}
		names = names[:0]
		var total int64
		for _, f := range files {
			if shards[f.Name] || !model.IsSideFileName(f.Name) || notSideFile(f.Name) {
				continue
			}
			if total += f.Size; f.Size > safetensors.MaxAuxSize || total > maxAuxTotal {
				return nil, false, fmt.Errorf("side file %s%s: %d bytes (side files are held in memory, %d MiB each and %d MiB together at most)",
					c.Root, f.Name, f.Size, safetensors.MaxAuxSize>>20, maxAuxTotal>>20)
			}
			names = append(names, f.Name)
		}
	}
	aux = map[string][]byte{}
	for _, name := range names {
		b, err := c.ReadAux(name)
		if unlisted && errors.Is(err, safetensors.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		aux[name] = b
	}
	return aux, unlisted, nil
}

// reads calls fn with each read of a checkpoint shard the file's writing
// makes, in order (an export source's rebuilt tensors are read locally).
func (of *outFile) reads(fn func(f *safetensors.File, off, n int64)) {
	if of.verbatim != nil {
		fn(of.verbatim, 0, of.verbatim.Size)
		return
	}
	for _, st := range of.steps {
		if st.tensor < 0 {
			fn(st.src, st.off, st.n)
			continue
		}
		t := of.tensors[st.tensor]
		tensorAt := func(src tensorData, off, n int64) {
			if ft, ok := src.(fileTensor); ok {
				fn(ft.f, ft.f.DataStart+ft.t.Begin+off, n)
			}
		}
		switch {
		case t.pack != nil:
			t.pack.reads(func(off, n int64) { tensorAt(t.pack.src, off, n) })
		case t.held != HeldSlice:
			tensorAt(t.src, 0, t.size())
		case sliceDirect(t):
			forRuns(t.shape, t.spec.DType, t.axis, t.start, t.stop, func(off, n int64) error {
				tensorAt(t.src, off, n)
				return nil
			})
		default:
			sliceWindows(t, windowSize, func(_, _, off, n int64) error {
				tensorAt(t.src, off, n)
				return nil
			})
		}
	}
}

// stream starts fetching the file's source bytes and returns a copy of the
// file that reads the stream, and how to end it.
func (n *netFetch) stream(ctx context.Context, of *outFile) (*outFile, func() error) {
	var ranges []remote.Range
	of.reads(func(f *safetensors.File, off, size int64) {
		ranges = append(ranges, remote.Range{File: f.Path, Off: off, Len: size})
	})
	st := n.src.Stream(ctx, ranges, remote.FetchOptions{Connections: n.conns})
	ra := streamReaders(st.File)
	c := *of
	c.tensors = make([]outTensor, len(of.tensors))
	for i, t := range of.tensors {
		t.src = rebindTensor(t.src, ra)
		if t.pack != nil {
			pj := *t.pack
			pj.src = rebindTensor(pj.src, ra)
			t.pack = &pj
		}
		c.tensors[i] = t
	}
	c.readers = ra
	return &c, func() error {
		stats, err := st.Close()
		n.mu.Lock()
		n.sum = n.sum.Add(stats)
		n.mu.Unlock()
		return err
	}
}

// streamReaders gives each shard one reader of a stream, made on first use.
func streamReaders(file func(name string) io.ReaderAt) func(*safetensors.File) io.ReaderAt {
	readers := map[*safetensors.File]io.ReaderAt{}
	return func(f *safetensors.File) io.ReaderAt {
		r, ok := readers[f]
		if !ok {
			r = file(f.Path)
			readers[f] = r
		}
		return r
	}
}

// rebindTensor reads a shard tensor's bytes through ra; other data is kept.
func rebindTensor(src tensorData, ra func(*safetensors.File) io.ReaderAt) tensorData {
	if ft, ok := src.(fileTensor); ok {
		ft.SectionReader = io.NewSectionReader(ra(ft.f), ft.f.DataStart+ft.t.Begin, ft.t.Size())
		return ft
	}
	return src
}

// streamTensors returns s.data with the tensors of order (indexes into
// s.data), to be read whole in that order, served from one Stream of a
// remote source, coalescing a shard's consecutive tensors; and how to end
// it. A local source's data is returned as it is.
func (s *Source) streamTensors(ctx context.Context, order []int) ([]tensorData, func() error) {
	if s.remote == nil {
		return s.data, func() error { return nil }
	}
	var ranges []remote.Range
	for _, i := range order {
		if ft, ok := s.data[i].(fileTensor); ok {
			ranges = append(ranges, remote.Range{File: ft.f.Path, Off: ft.f.DataStart + ft.t.Begin, Len: ft.t.Size()})
		}
	}
	st := s.remote.Stream(ctx, ranges, remote.FetchOptions{})
	ra := streamReaders(st.File)
	data := make([]tensorData, len(s.data))
	for i, d := range s.data {
		data[i] = rebindTensor(d, ra)
	}
	return data, func() error {
		_, err := st.Close()
		return err
	}
}

// FetchBytes is what writing the whole plan reads from a remote source (0
// for a local one).
func (p *Plan) FetchBytes() int64 {
	if p.src == nil || p.src.remote == nil {
		return 0
	}
	var n int64
	for _, d := range p.Dirs {
		for _, of := range d.files {
			of.reads(func(_ *safetensors.File, _, size int64) { n += size })
		}
	}
	return n
}
