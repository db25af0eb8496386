//go:build linux

package fsx

import (
	"io/fs"
	"syscall"
)

// sysStamp returns the change time and the file's identity.
func sysStamp(fi fs.FileInfo) (ctime int64, dev, inode uint64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, 0
	}
	return st.Ctim.Sec*1e9 + st.Ctim.Nsec, uint64(st.Dev), st.Ino
}
