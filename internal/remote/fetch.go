package remote

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// Defaults for FetchOptions fields left zero.
const (
	// DefaultConnections is the parallel requests of a fetch: enough to fill a
	// datacenter link from a CDN that serves each connection at tens of MB/s.
	DefaultConnections = 16
	// defaultGap: reading 128 KiB more costs less than another round trip.
	defaultGap = 128 << 10
	// defaultRequestSize: longer spans are split over the connections.
	defaultRequestSize = 4 << 20
)

// Range is a byte range of one file (named relative to the source) that a
// plan needs.
type Range struct {
	File     string
	Off, Len int64
}

// chunk is the bytes at Off inside range Index of fetch's list, delivered
// range by range, each by increasing Off. Data is reused once delivered.
type chunk struct {
	Index int
	Off   int64
	Data  []byte
}

// FetchOptions tune a Stream's fetch. The zero value is ready to use.
type FetchOptions struct {
	// Connections bounds the requests in flight (0: DefaultConnections).
	Connections int
	// Gap: consecutive ranges of one file at most Gap bytes apart are read by
	// one request (0: defaultGap, negative: only touching ranges).
	Gap int64
	// RequestSize bounds one request (0: defaultRequestSize), and so memory:
	// one buffer of at most this size per connection.
	RequestSize int64
}

func (o FetchOptions) withDefaults() FetchOptions {
	o.Connections = cmp.Or(max(o.Connections, 0), DefaultConnections)
	o.Gap = max(cmp.Or(o.Gap, defaultGap), 0)
	o.RequestSize = cmp.Or(max(o.RequestSize, 0), defaultRequestSize)
	return o
}

// part is one planned request: bytes [off, off+n) of file, covering ranges
// first..last of the caller's list.
type part struct {
	file        string
	off, n      int64
	first, last int
}

// planParts coalesces consecutive ranges of one file that move forward by at
// most gap bytes into spans, and cuts spans into requests of at most size
// bytes. A span never skips more bytes than it needs (a fetch requests at
// most twice its ranges' bytes). Ranges keep their order.
func planParts(ranges []Range, gap, size int64) []part {
	var parts []part
	flush := func(file string, lo, hi int64, first, last int) {
		for at := lo; at < hi; at += size {
			n := min(size, hi-at)
			// The ranges overlapping [at, at+n) among first..last, skipping
			// empty ones (of any file).
			for first < last && (ranges[first].Len == 0 || ranges[first].Off+ranges[first].Len <= at) {
				first++
			}
			l := first
			for l < last && (ranges[l+1].Len == 0 || ranges[l+1].Off < at+n) {
				l++
			}
			parts = append(parts, part{file: file, off: at, n: n, first: first, last: l})
		}
	}
	start := -1
	var lo, hi, needed, waste int64
	for i, r := range ranges {
		if r.Len == 0 {
			continue
		}
		if start >= 0 && r.File == ranges[start].File && r.Off >= hi && r.Off-hi <= gap &&
			waste+(r.Off-hi) <= needed+r.Len {
			waste += r.Off - hi
			needed += r.Len
			hi = r.Off + r.Len
			continue
		}
		if start >= 0 {
			flush(ranges[start].File, lo, hi, start, lastNonEmpty(ranges, start, i))
		}
		start, lo, hi, needed, waste = i, r.Off, r.Off+r.Len, r.Len, 0
	}
	if start >= 0 {
		flush(ranges[start].File, lo, hi, start, lastNonEmpty(ranges, start, len(ranges)))
	}
	return parts
}

// lastNonEmpty is the last range before end (and from start on) with bytes.
func lastNonEmpty(ranges []Range, start, end int) int {
	for end--; end > start && ranges[end].Len == 0; end-- {
	}
	return end
}

type job struct {
	p    part
	buf  []byte
	done chan error
}

// fetch reads the ranges and hands their bytes to deliver in order (see
// chunk), from the calling goroutine. Each request holds one of Connections
// buffers until its bytes are delivered, which bounds the requests in flight
// and the memory. Every file is opened and every range checked first. The
// first error, from a request or deliver, cancels everything; fetch returns
// after all its requests have stopped.
func (s *Source) fetch(ctx context.Context, ranges []Range, o FetchOptions, deliver func(chunk) error) (st Stats, err error) {
	o = o.withDefaults()
	retries0 := s.retries.Load()
	defer func() { st.Retries = s.retries.Load() - retries0 }()
	files, err := s.openAll(ctx, ranges, o.Connections)
	if err != nil {
		return st, err
	}
	for i, r := range ranges {
		f := files[r.File]
		if r.Off < 0 || r.Len < 0 || r.Off > f.size || r.Len > f.size-r.Off {
			return st, &Error{File: r.File, Kind: ErrSource, Detail: fmt.Sprintf("range %d (bytes %d+%d) is outside the file's %d bytes", i, r.Off, r.Len, f.size)}
		}
		st.Needed += r.Len
	}
	parts := planParts(ranges, o.Gap, o.RequestSize)
	st.Requests = int64(len(parts))
	var bufSize int64 // the longest request: small fetches get small buffers
	for _, p := range parts {
		st.Requested += p.n
		bufSize = max(bufSize, p.n)
	}
	var fetched atomic.Int64
	defer func() { st.Fetched = fetched.Load() }()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	queue := make(chan *job, o.Connections)
	free := make(chan []byte, o.Connections) // nil: a buffer not yet allocated
	for range o.Connections {
		free <- nil
	}
	var workers sync.WaitGroup
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		defer close(queue)
		for _, p := range parts {
			var buf []byte
			select {
			case buf = <-free:
			case <-ctx.Done():
				return
			}
			if ctx.Err() != nil { // the select may pick free though ctx is done
				return
			}
			if buf == nil {
				buf = make([]byte, bufSize)
			}
			j := &job{p: p, buf: buf[:p.n], done: make(chan error, 1)}
			queue <- j // never blocks: each queued job holds one of Connections buffers
			workers.Go(func() {
				err := files[p.file].readRange(ctx, j.buf, p.off, &fetched)
				if err != nil {
					cancel(err) // before deliverAll frees the buffer, so nothing new starts
				}
				j.done <- err
			})
		}
	}()
	err = s.deliverAll(ctx, queue, free, ranges, deliver)
	if err != nil {
		cancel(err)
	}
	<-dispatched
	workers.Wait()
	return st, err
}

// deliverAll hands each finished request's bytes to deliver, in plan order.
func (s *Source) deliverAll(ctx context.Context, queue chan *job, free chan []byte, ranges []Range, deliver func(chunk) error) error {
	for j := range queue {
		if err := <-j.done; err != nil {
			if c := context.Cause(ctx); c != nil && errors.Is(err, context.Canceled) {
				err = c
			}
			return err
		}
		p := j.p
		for i := p.first; i <= p.last; i++ {
			r := ranges[i]
			lo, hi := max(r.Off, p.off), min(r.Off+r.Len, p.off+p.n)
			if lo >= hi {
				continue
			}
			if err := deliver(chunk{Index: i, Off: lo - r.Off, Data: j.buf[lo-p.off : hi-p.off]}); err != nil {
				return err
			}
		}
		free <- j.buf[:cap(j.buf)]
	}
	return context.Cause(ctx) // nil unless the dispatcher stopped early
}

// openAll probes every file the ranges name, conns at a time, stopping at
// the first failure.
func (s *Source) openAll(ctx context.Context, ranges []Range, conns int) (map[string]*File, error) {
	seen := map[string]bool{}
	files := map[string]*File{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conns)
	for _, r := range ranges {
		if seen[r.File] {
			continue
		}
		seen[r.File] = true
		g.Go(func() error {
			if gctx.Err() != nil { // cancelled, or another open failed: start no more
				return context.Cause(gctx)
			}
			f, err := s.Open(gctx, r.File)
			if err == nil {
				mu.Lock()
				files[r.File] = f
				mu.Unlock()
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return files, context.Cause(ctx)
}
