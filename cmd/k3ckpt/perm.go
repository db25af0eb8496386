package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// limitToSource caps the permission bits of every file the command writes
// at those the source's .safetensors and .json files share (at the top and
// in rank-NN or stage-NN directories), within the umask: no output is more
// readable than its source. A remote or unlisted source sets no cap.
func limitToSource(src string) (restore func()) {
	if remote.IsRemote(src) {
		return func() {}
	}
	perm, found := os.ModePerm, false // LimitPerm caps it at what a new file may be
	var scan func(dir string, depth int)
	scan = func(dir string, depth int) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			name := e.Name()
			if e.IsDir() && depth == 0 && (strings.HasPrefix(name, "rank-") || strings.HasPrefix(name, "stage-")) {
				scan(filepath.Join(dir, name), 1)
				continue
			}
			if !strings.HasSuffix(name, ".safetensors") && !strings.HasSuffix(name, ".json") {
				continue
			}
			if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() {
				perm &= fi.Mode().Perm()
				found = true
			}
		}
	}
	scan(src, 0)
	if !found {
		return func() {}
	}
	return filewrite.LimitPerm(perm)
}
