//go:build !linux

package fsx

import "io/fs"

// sysStamp has no portable change time or inode: size and mtime remain.
func sysStamp(fs.FileInfo) (ctime int64, dev, inode uint64) { return 0, 0, 0 }
