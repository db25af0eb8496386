package remote

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

// TestStreamServesPlannedReads reads a plan's ranges through Stream in the
// plan's order, in pieces that cut across the fetcher's requests: every byte
// is right, every read came from the fetch (none unplanned), and the bytes
// received stay within the fetch's bound (ranges plus merged gaps).
func TestStreamServesPlannedReads(t *testing.T) {
	files := map[string][]byte{"a": pattern(50000, 1), "b": pattern(30000, 2)}
	fs := newFileServer(t, files)
	s := newTestSource(t, fs.url(), fastOptions())
	ranges := []Range{{"a", 100, 9000}, {"a", 9100, 5000}, {"a", 30000, 20000}, {"b", 0, 30000}, {"a", 0, 10}}
	st := s.Stream(context.Background(), ranges, FetchOptions{Connections: 3, RequestSize: 4096, Gap: -1})
	for _, r := range ranges {
		f := st.File(r.File)
		// Read sizes that do not divide the request size.
		for done := int64(0); done < r.Len; {
			n := min(3001, r.Len-done)
			p := make([]byte, n)
			if _, err := f.ReadAt(p, r.Off+done); err != nil {
				t.Fatalf("%v at %d: %v", r, done, err)
			}
			if !bytes.Equal(p, files[r.File][r.Off+done:r.Off+done+n]) {
				t.Fatalf("%v at %d: wrong bytes", r, done)
			}
			done += n
		}
	}
	stats, err := st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if stats.Unplanned != 0 || stats.Needed != Needed(ranges) {
		t.Fatalf("unplanned %d, needed %d (want 0, %d)", stats.Unplanned, stats.Needed, Needed(ranges))
	}
	// Probes (8 bytes per file) plus exactly the ranges: Gap -1 merges only touching ones.
	if got, want := fs.bytesSent(), Needed(ranges)+2*probeLen; got != want {
		t.Fatalf("server sent %d bytes, want %d", got, want)
	}
}

// TestStreamUnplannedRead: a read that is not the next planned one is still
// served right, by a request of its own, and counted.
func TestStreamUnplannedRead(t *testing.T) {
	files := map[string][]byte{"a": pattern(20000, 3)}
	fs := newFileServer(t, files)
	s := newTestSource(t, fs.url(), fastOptions())
	ranges := []Range{{"a", 0, 10000}, {"a", 10000, 10000}}
	st := s.Stream(context.Background(), ranges, FetchOptions{RequestSize: 4096})
	p := make([]byte, 100)
	if _, err := st.File("a").ReadAt(p, 15000); err != nil || !bytes.Equal(p, files["a"][15000:15100]) {
		t.Fatalf("out-of-plan read: %v", err)
	}
	// Past the end: io.EOF with what there was.
	if n, err := st.File("a").ReadAt(p, 19950); n != 50 || err != io.EOF {
		t.Fatalf("read at the end: %d, %v", n, err)
	}
	stats, err := st.Close() // stops the fetch nobody reads
	if err != nil {
		t.Fatal(err)
	}
	if stats.Unplanned != 150 {
		t.Fatalf("unplanned %d, want 150", stats.Unplanned)
	}
}

// TestStreamFetchError: a file that changes on the server fails the read
// that needs its bytes, with ErrChanged naming the file.
func TestStreamFetchError(t *testing.T) {
	files := map[string][]byte{"a": pattern(20000, 4)}
	fs := newFileServer(t, files)
	s := newTestSource(t, fs.url(), fastOptions())
	if _, err := s.Open(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	fs.set("a", pattern(20000, 5), `"v2"`)
	st := s.Stream(context.Background(), []Range{{"a", 0, 20000}}, FetchOptions{})
	p := make([]byte, 20000)
	_, err := st.File("a").ReadAt(p, 0)
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("got %v, want ErrChanged", err)
	}
	if _, err := st.Close(); !errors.Is(err, ErrChanged) {
		t.Fatalf("Close: %v", err)
	}
}
