//go:build unix

package model

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

// A FIFO where a side file should be is refused, named, instead of being
// left out of the output (or blocking the copy).
func TestSideFilesRefuseSpecialFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "tokenizer_config.json"), 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	_, err := SideFiles(root, nil)
	if !errors.Is(err, fsx.ErrNotRegular) || !strings.Contains(err.Error(), "tokenizer_config.json") {
		t.Fatalf("SideFiles with a FIFO: %v, want ErrNotRegular naming tokenizer_config.json", err)
	}
	// A link to a directory is not a side file either.
	if err := os.Remove(filepath.Join(root, "tokenizer_config.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(root, "extra")); err != nil {
		t.Fatal(err)
	}
	if _, err := SideFiles(root, nil); !errors.Is(err, fsx.ErrNotRegular) {
		t.Fatalf("SideFiles with a link to a directory: %v, want ErrNotRegular", err)
	}
}
