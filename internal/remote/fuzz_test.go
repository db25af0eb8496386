package remote

import (
	"strings"
	"testing"
)

// FuzzContentRange: whatever a server sends, the parser either refuses it
// or returns positions that are consistent and print back to the input.
func FuzzContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-7/100", "bytes */0", "bytes 5-4/10", "bytes 0-9/10", "bytes -1-3/9",
		"bytes 0-7/", "bits 0-7/8", "bytes 99999999999999999999-1/2", "bytes 0-0/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		start, last, total, err := parseContentRange(s)
		if err != nil {
			return
		}
		if last == -1 { // "bytes */total"
			if !strings.HasPrefix(s, "bytes */") || total < 0 {
				t.Fatalf("%q: star form", s)
			}
			return
		}
		if start < 0 || last < start || total <= last {
			t.Fatalf("%q: inconsistent %d-%d/%d accepted", s, start, last, total)
		}
	})
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "-1", "Wed, 21 Oct 2015 07:28:00 GMT", "x", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d := parseRetryAfter(s, fixedNow); d < 0 {
			t.Fatalf("%q: negative wait %v", s, d)
		}
	})
}

var fixedNow = mustTime("Fri, 02 Jan 2026 03:04:05 GMT")
