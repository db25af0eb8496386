package remote

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// collect runs Fetch and reassembles each range from its chunks, checking
// the delivery order promised by chunk.
func collect(t *testing.T, s *Source, ranges []Range, o FetchOptions) ([][]byte, Stats, error) {
	t.Helper()
	out := make([][]byte, len(ranges))
	last := -1
	st, err := s.fetch(context.Background(), ranges, o, func(c chunk) error {
		if c.Index < last || (c.Index != last && c.Off != 0) || c.Off != int64(len(out[c.Index])) {
			t.Errorf("chunk of range %d at %d delivered out of order (after range %d, %d bytes so far)", c.Index, c.Off, last, len(out[c.Index]))
		}
		last = c.Index
		out[c.Index] = append(out[c.Index], c.Data...)
		return nil
	})
	return out, st, err
}

func checkRanges(t *testing.T, files map[string][]byte, ranges []Range, got [][]byte) {
	t.Helper()
	for i, r := range ranges {
		if !bytes.Equal(got[i], files[r.File][r.Off:r.Off+r.Len]) {
			t.Errorf("range %d (%s %d+%d): wrong bytes (%d received)", i, r.File, r.Off, r.Len, len(got[i]))
		}
	}
}

func TestPlanParts(t *testing.T) {
	r := []Range{
		{"a", 0, 10}, {"a", 10, 5}, // touching: one span
		{"a", 20, 5},  // 5-byte gap: merged at gap 5
		{"a", 100, 1}, // far: new span
		{"b", 101, 1}, // other file
		{"b", 50, 1},  // backwards: new span
		{"b", 51, 0},  // empty: skipped
		{"b", 52, 30}, // 1-byte gap after the empty one
	}
	parts := planParts(r, 5, 1<<20)
	want := []part{{"a", 0, 25, 0, 2}, {"a", 100, 1, 3, 3}, {"b", 101, 1, 4, 4}, {"b", 50, 32, 5, 7}}
	if len(parts) != len(want) {
		t.Fatalf("got %+v", parts)
	}
	for i := range want {
		if parts[i] != want[i] {
			t.Errorf("part %d: %+v, want %+v", i, parts[i], want[i])
		}
	}
	// Gaps are merged only while a span's dropped bytes do not outnumber its
	// needed bytes: skipping 12 to reach 1 more after 10 is not worth it;
	// skipping 1 to reach 20 more is.
	parts = planParts([]Range{{"a", 0, 10}, {"a", 22, 1}, {"a", 24, 20}}, 100, 1<<20)
	want = []part{{"a", 0, 10, 0, 0}, {"a", 22, 22, 1, 2}}
	if len(parts) != 2 || parts[0] != want[0] || parts[1] != want[1] {
		t.Errorf("waste bound: %+v, want %+v", parts, want)
	}
	// Gap 0: only touching ranges merge.
	if n := len(planParts(r, 0, 1<<20)); n != 6 {
		t.Errorf("gap 0: %d parts, want 6", n)
	}
	// A long span is cut into requests of at most the request size, each
	// covering exactly the ranges it overlaps.
	parts = planParts([]Range{{"a", 0, 10}, {"a", 10, 25}, {"a", 35, 5}}, 0, 16)
	want = []part{{"a", 0, 16, 0, 1}, {"a", 16, 16, 1, 1}, {"a", 32, 8, 1, 2}}
	for i := range want {
		if i >= len(parts) || parts[i] != want[i] {
			t.Errorf("cut %d: %+v, want %+v", i, parts, want)
			break
		}
	}
}

// Adjacent ranges become one request; the bytes fetched are the bytes
// needed plus the gaps merged over, never the whole file.
func TestFetchCoalescesAndBoundsBytes(t *testing.T) {
	files := map[string][]byte{"a": pattern(1<<20, 1), "b": pattern(1<<20, 2)}
	fs := newFileServer(t, files)
	s := newTestSource(t, fs.url(), fastOptions())
	var ranges []Range
	for i := int64(0); i < 64; i++ { // 64 adjacent 1000-byte tensors of a
		ranges = append(ranges, Range{"a", 4096 + i*1000, 1000})
	}
	ranges = append(ranges, Range{"a", 4096 + 64*1000 + 100, 50}) // after a 100-byte gap
	ranges = append(ranges, Range{"b", 500_000, 70_000})
	got, st, err := collect(t, s, ranges, FetchOptions{Gap: 1000, RequestSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	checkRanges(t, files, ranges, got)
	if st.Requests != 2 {
		t.Errorf("%d requests, want 2 (one per file)", st.Requests)
	}
	needed := int64(64*1000 + 50 + 70_000)
	if st.Needed != needed || st.Requested != needed+100 || st.Fetched != st.Requested {
		t.Errorf("stats %+v: want needed %d, requested %d, fetched = requested", st, needed, needed+100)
	}
	// What the server sent: the two probes and the two requests.
	if sent := fs.bytesSent(); sent != 2*probeLen+st.Requested {
		t.Errorf("server sent %d bytes, want %d", sent, 2*probeLen+st.Requested)
	}
	dataReqs := 0
	for _, e := range fs.requests() {
		if e.rng != "bytes=0-7" {
			dataReqs++
		}
	}
	if dataReqs != 2 {
		t.Errorf("%d data requests reached the server", dataReqs)
	}
	if st.Requested > 2*st.Needed {
		t.Errorf("requested %d bytes for %d needed", st.Requested, st.Needed)
	}
	// With a gap below 100 the trailing range is its own request.
	_, st, err = collect(t, s, ranges, FetchOptions{Gap: 99})
	if err != nil || st.Requests != 3 || st.Requested != needed {
		t.Errorf("gap 99: %+v %v", st, err)
	}
}

// Large ranges are split over the connections; all bytes arrive in order
// even when the requests finish out of order.
func TestFetchParallelInOrder(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{"a": pattern(3<<20, 3)}
	fs := newFileServer(t, files)
	var inFlight, peak atomic.Int32
	fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		c := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if c <= p || peak.CompareAndSwap(p, c) {
				break
			}
		}
		if n%3 == 0 { // some requests are slow, so later ones overtake them
			time.Sleep(2 * time.Millisecond)
		}
		return false
	}
	s := newTestSource(t, fs.url(), fastOptions())
	ranges := []Range{{"a", 0, 1 << 20}, {"a", 1 << 20, 2 << 20}}
	got, st, err := collect(t, s, ranges, FetchOptions{Connections: 4, RequestSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	checkRanges(t, files, ranges, got)
	if st.Requests != 48 {
		t.Errorf("%d requests, want 48", st.Requests)
	}
	if p := peak.Load(); p > 4 {
		t.Errorf("%d requests in flight, connections is 4", p)
	}
}

// A consumer that stops taking chunks stops the fetch after one buffer per
// connection:
// memory does not grow with the ranges.
func TestFetchWindowBoundsMemory(t *testing.T) {
	files := map[string][]byte{"a": pattern(1<<20, 4)}
	fs := newFileServer(t, files)
	s := newTestSource(t, fs.url(), fastOptions())
	release := make(chan struct{})
	var once sync.Once
	dataReqs := func() int {
		n := 0
		for _, e := range fs.requests() {
			if e.rng != "bytes=0-7" {
				n++
			}
		}
		return n
	}
	var seenWhileBlocked int
	_, err := s.fetch(context.Background(), []Range{{"a", 0, 1 << 20}}, FetchOptions{Connections: 3, RequestSize: 16 << 10},
		func(c chunk) error {
			once.Do(func() {
				go func() {
					// Give the fetcher every chance to run ahead, then look.
					for i := 0; i < 50; i++ {
						time.Sleep(time.Millisecond)
					}
					seenWhileBlocked = dataReqs()
					close(release)
				}()
				<-release
			})
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if seenWhileBlocked > 3 {
		t.Errorf("%d requests made while the consumer held the first chunk; connections is 3", seenWhileBlocked)
	}
	if dataReqs() != 64 {
		t.Errorf("%d data requests, want 64", dataReqs())
	}
}

// Dropped connections during a fetch are resumed; the bytes fetched exceed
// the bytes requested only by what the failed attempts delivered.
func TestFetchResumes(t *testing.T) {
	files := map[string][]byte{"a": pattern(1<<20, 5)}
	fs := newFileServer(t, files)
	var drops atomic.Int32
	fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		if n%2 != 0 || drops.Add(1) > 5 {
			return false
		}
		a, b, _ := parseTestRange(r.Header.Get("Range"), 1<<20)
		w.Header().Set("ETag", fs.etags[name])
		w.Header().Set("Content-Range", "bytes "+itoa(a)+"-"+itoa(b)+"/"+itoa(1<<20))
		w.Header().Set("Content-Length", itoa(b-a+1))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(files[name][a : a+(b-a)/2])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	s := newTestSource(t, fs.url(), fastOptions())
	ranges := []Range{{"a", 100, 900_000}}
	got, st, err := collect(t, s, ranges, FetchOptions{Connections: 3, RequestSize: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	checkRanges(t, files, ranges, got)
	if st.Retries != 5 || st.Fetched != st.Requested {
		t.Errorf("stats %+v: want 5 retries and every byte fetched once", st)
	}
}

// The first failure stops the fetch: a file that changes mid-run, a consumer
// error, a cancelled context — and Fetch returns only once its requests have
// stopped.
func TestFetchStopsOnFirstError(t *testing.T) {
	files := map[string][]byte{"a": pattern(1<<20, 6)}
	t.Run("changed", func(t *testing.T) {
		fs := newFileServer(t, map[string][]byte{"a": files["a"]})
		s := newTestSource(t, fs.url(), fastOptions())
		calls, before := 0, 0
		_, err := s.fetch(context.Background(), []Range{{"a", 0, 1 << 20}}, FetchOptions{Connections: 2, RequestSize: 16 << 10}, func(chunk) error {
			if calls++; calls == 3 { // the file is replaced while the fetch runs
				before = len(fs.requests())
				fs.set("a", pattern(1<<20, 9), `"v2"`)
			}
			return nil
		})
		if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "remote a:") {
			t.Fatalf("got %v", err)
		}
		// At most the requests in flight, the window's and one more start after
		// the change: the fetch stops instead of running through all 64.
		if after := len(fs.requests()) - before; after > 2*2+1 {
			t.Errorf("%d requests after the change", after)
		}
	})
	t.Run("consumer", func(t *testing.T) {
		fs := newFileServer(t, map[string][]byte{"a": files["a"]})
		s := newTestSource(t, fs.url(), fastOptions())
		stop := errors.New("disk full")
		calls := 0
		_, err := s.fetch(context.Background(), []Range{{"a", 0, 1 << 20}}, FetchOptions{Connections: 2, RequestSize: 16 << 10}, func(chunk) error {
			calls++
			if calls == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || calls != 3 {
			t.Fatalf("got %v after %d calls", err, calls)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		fs := newFileServer(t, map[string][]byte{"a": files["a"]})
		hung := make(chan struct{}, 64)
		fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
			if n == 1 {
				return false // the probe
			}
			hung <- struct{}{}
			<-r.Context().Done() // hangs until the client goes away
			return true
		}
		s := newTestSource(t, fs.url(), fastOptions())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := s.fetch(ctx, []Range{{"a", 0, 1 << 20}}, FetchOptions{Connections: 4, RequestSize: 16 << 10}, func(chunk) error { return nil })
			done <- err
		}()
		<-hung
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("got %v", err)
			}
		case <-time.After(20 * time.Second): // a hang guard, not a timing assertion
			t.Fatal("Fetch did not return after cancellation")
		}
	})
	t.Run("range outside file", func(t *testing.T) {
		fs := newFileServer(t, map[string][]byte{"a": files["a"]})
		s := newTestSource(t, fs.url(), fastOptions())
		_, err := s.fetch(context.Background(), []Range{{"a", 1 << 20, 1}}, FetchOptions{}, func(chunk) error { return nil })
		if !errors.Is(err, ErrSource) || len(fs.requests()) != 1 {
			t.Errorf("got %v after %d requests", err, len(fs.requests()))
		}
	})
	t.Run("missing file", func(t *testing.T) {
		fs := newFileServer(t, map[string][]byte{"a": files["a"]})
		s := newTestSource(t, fs.url(), fastOptions())
		_, err := s.fetch(context.Background(), []Range{{"a", 0, 1}, {"nope", 0, 1}}, FetchOptions{}, func(chunk) error { return nil })
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("got %v", err)
		}
	})
}

// The source's own context bounds everything, ReadAt included.
func TestSourceContextBoundsReadAt(t *testing.T) {
	fs := newFileServer(t, map[string][]byte{"a": pattern(1000, 1)})
	fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		if n == 1 {
			return false
		}
		<-r.Context().Done()
		return true
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, _ := NewSource(ctx, location{Base: fs.url()}, fastOptions())
	f, err := s.Open(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for len(fs.requests()) < 2 { // the read is hanging on the server
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err = f.ReadAt(make([]byte, 100), 10)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v", err)
	}
}
