package fsx

import "io/fs"

// Stamp is what the filesystem says about a file's version: any write to
// the file changes its size or its modification and change times, and a
// replacement under its name changes the device and inode. Comparing stamps
// tells whether a file is still the one seen earlier without reading it
// (a write of the same size within one timestamp tick of the earlier look,
// a few milliseconds, is the one change it can miss).
type Stamp struct {
	Size  int64  `json:"size"`
	MTime int64  `json:"mtime_ns"`
	CTime int64  `json:"ctime_ns,omitempty"` // 0 where the platform has none
	Dev   uint64 `json:"dev,omitempty"`
	Inode uint64 `json:"inode,omitempty"`
}

// StampOf returns the stamp of a file's info (from Stat or Lstat of a
// regular file).
func StampOf(fi fs.FileInfo) Stamp {
	s := Stamp{Size: fi.Size(), MTime: fi.ModTime().UnixNano()}
	s.CTime, s.Dev, s.Inode = sysStamp(fi)
	return s
}
