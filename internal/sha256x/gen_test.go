package sha256x

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGenerated checks that block_amd64.s is what gen.go writes.
func TestGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gen.go")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out := filepath.Join(t.TempDir(), "block.s")
	if b, err := exec.Command(goTool, "run", "gen.go", "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("go run gen.go: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("block_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("block_amd64.s differs from what gen.go writes: run go generate ./internal/sha256x")
	}
}
