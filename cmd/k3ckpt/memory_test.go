package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// The collector runs at a quarter of the live heap while a large
// checkpoint is planned, and at its default pace for one whose index says
// the plan stays small; GOGC set by the user wins.
func TestPlanMemoryByIndexSize(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	os.Unsetenv("GOMEMLIMIT")
	gc := func() int { p := debug.SetGCPercent(100); debug.SetGCPercent(p); return p }
	for _, c := range []struct {
		size int64
		want int
	}{{1 << 20, 100}, {smallPlanIndex + 1, 25}} {
		dir := t.TempDir()
		f, err := os.Create(filepath.Join(dir, safetensors.IndexName))
		if err == nil {
			err = f.Truncate(c.size)
		}
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		planMemory(dir)
		if got := gc(); got != c.want {
			t.Errorf("index of %d bytes: GOGC %d, want %d", c.size, got, c.want)
		}
	}
	t.Setenv("GOGC", "400")
	debug.SetGCPercent(400)
	planMemory(t.TempDir())
	if got := gc(); got != 400 {
		t.Errorf("with GOGC=400 set: GOGC %d", got)
	}
}
