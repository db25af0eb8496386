package fsx

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An output directory in the way of MkdirAll is named for what it is: a
// dangling link (not "file exists"), a file; a link to a directory is used.
func TestMkdirAllSaysWhatIsInTheWay(t *testing.T) {
	tmp := t.TempDir()
	dangling, file, good := filepath.Join(tmp, "dangling"), filepath.Join(tmp, "file"), filepath.Join(tmp, "good")
	if err := os.Symlink(filepath.Join(tmp, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(tmp, good); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(dangling); err == nil || !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("dangling link: %v", err)
	}
	if err := MkdirAll(file); err == nil || !strings.Contains(err.Error(), "a regular file, not a directory") {
		t.Errorf("file: %v", err)
	}
	if err := MkdirAll(good); err != nil {
		t.Errorf("link to a directory: %v", err)
	}
}
