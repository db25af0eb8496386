package remote

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// errStreamClosed is the cause a closed stream's fetch stops with.
var errStreamClosed = errors.New("stream closed")

// stream serves the reads of an executor that follows a plan: fetch runs in
// the background over the plan's ranges, and the executor's ReadAt calls, in
// the plan's order, take the bytes as they arrive. A read that is not the
// next planned one gets a request of its own (Stats.Unplanned): a plan that
// misses a read costs bytes, never correctness. ReadAt calls are serialized.
type stream struct {
	src    *Source
	ranges []Range
	cancel context.CancelCauseFunc

	chunks   chan chunk
	consumed chan struct{}
	done     chan struct{}
	stats    Stats // set before done is closed
	err      error

	mu        sync.Mutex
	cur       chunk
	pos       int // bytes of cur already read
	have      bool
	unplanned atomic.Int64
}

// Stream starts fetching ranges for an executor that will read them, in this
// order, through the readers of File. Close it when done.
func (s *Source) Stream(ctx context.Context, ranges []Range, o FetchOptions) *stream {
	ctx, cancel := context.WithCancelCause(ctx)
	st := &stream{src: s, ranges: ranges, cancel: cancel,
		chunks: make(chan chunk), consumed: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(st.done)
		st.stats, st.err = s.fetch(ctx, ranges, o, func(c chunk) error {
			select {
			case st.chunks <- c:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			select { // Data is the fetch's buffer: hold it until read
			case <-st.consumed:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
	}()
	return st
}

// File is an io.ReaderAt over one file of the stream's source.
func (st *stream) File(name string) io.ReaderAt { return streamFile{st, name} }

type streamFile struct {
	st   *stream
	name string
}

func (f streamFile) ReadAt(p []byte, off int64) (int, error) { return f.st.readAt(f.name, p, off) }

func (st *stream) readAt(name string, p []byte, off int64) (int, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for n < len(p) {
		if !st.have {
			select {
			case c := <-st.chunks:
				st.cur, st.pos, st.have = c, 0, true
			case <-st.done:
				if st.err != nil && !errors.Is(st.err, errStreamClosed) {
					return n, st.err
				}
				return st.direct(name, p, n, off)
			}
		}
		r := st.ranges[st.cur.Index]
		at := r.Off + st.cur.Off + int64(st.pos)
		if r.File != name || at != off+int64(n) {
			return st.direct(name, p, n, off)
		}
		m := copy(p[n:], st.cur.Data[st.pos:])
		n += m
		st.pos += m
		if st.pos == len(st.cur.Data) {
			st.have = false
			st.consumed <- struct{}{}
		}
	}
	return n, nil
}

// direct reads p[n:] with a request of its own.
func (st *stream) direct(name string, p []byte, n int, off int64) (int, error) {
	f, err := st.src.Open(context.Background(), name)
	if err != nil {
		return n, err
	}
	m, err := f.ReadAt(p[n:], off+int64(n))
	st.unplanned.Add(int64(m))
	return n + m, err
}

// Close stops the fetch and reports what it cost, and the fetch's failure
// (nil when it completed or was stopped by Close).
func (st *stream) Close() (Stats, error) {
	st.cancel(errStreamClosed) // a second call does nothing
	<-st.done
	err := st.err
	if errors.Is(err, errStreamClosed) {
		err = nil
	}
	stats := st.stats
	stats.Unplanned = st.unplanned.Load()
	return stats, err
}

// Needed sums the ranges' lengths: the bytes a plan reads.
func Needed(ranges []Range) int64 {
	var n int64
	for _, r := range ranges {
		n += r.Len
	}
	return n
}
