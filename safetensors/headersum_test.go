package safetensors

import (
	"bytes"
	"crypto/sha256"
	"os"
	"strings"
	"testing"
)

// TestHeaderSum: a File read from a file knows the sha256 of that file's
// first DataStart bytes (computed here from the file's bytes), for a small
// header whose names alias it and for a large padded one whose names are
// copied out of it; a header parsed from the caller's bytes has none.
func TestHeaderSum(t *testing.T) {
	check := func(name string, b []byte, f *File) {
		t.Helper()
		got, ok := f.HeaderSum()
		if want := sha256.Sum256(b[:f.DataStart]); !ok || got != want {
			t.Errorf("%s: HeaderSum %x, %v; the file's first %d bytes hash to %x", name, got, ok, f.DataStart, want)
		}
	}
	for name := range loadGoldens(t) {
		path := "testdata/golden/" + name + ".safetensors"
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		check(name, b, f)
		f.Close()
		if pf, err := ParseHeader(b[8:f.DataStart]); err != nil {
			t.Fatal(err)
		} else if _, ok := pf.HeaderSum(); ok {
			t.Errorf("%s: a header parsed from the caller's bytes claims a sum", name)
		}
	}
	h := `{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}` + strings.Repeat(" ", 2<<20)
	b := rawFile(h, 1)
	f, err := ReadHeader(bytes.NewReader(b), int64(len(b)), "padded")
	if err != nil {
		t.Fatal(err)
	}
	if f.raw != nil {
		t.Fatal("the padded header is still held: this case no longer tests compacted names")
	}
	check("padded", b, f)
}
