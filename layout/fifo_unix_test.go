//go:build unix

package layout

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

// A FIFO where a layout file or a manifest belongs is refused, not opened
// (opening it would block forever). The deadline turns a regression into a
// failure instead of a hung test.
func TestFIFOsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "layout.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 2)
	go func() { _, err := loadLayout(fifo); done <- err }()
	go func() { _, err := readManifest(dir); done <- err }()
	for range 2 {
		select {
		case err := <-done:
			if !errors.Is(err, fsx.ErrNotRegular) {
				t.Errorf("FIFO: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("opening a FIFO hangs")
		}
	}
	_ = os.Remove(fifo)
}
