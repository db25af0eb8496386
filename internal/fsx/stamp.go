package fsx

import (
	"fmt"
	"io"
	"io/fs"
	"time"
)

// Stamp is what the filesystem says about a file's version: any write
// changes its size or its modification and change times, a replacement its
// device and inode (missing only a write of the same size within one
// timestamp tick of the earlier look).
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

// StampReader is the stamp of the file r reads from when r has Stat (a local
// file); for any other reader it is the zero Stamp, never reported changed.
func StampReader(r io.ReaderAt) (Stamp, error) {
	f, ok := r.(interface{ Stat() (fs.FileInfo, error) })
	if !ok {
		return Stamp{}, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return Stamp{}, err
	}
	return StampOf(fi), nil
}

// Change says in words how now differs from s ("" when it does not, or
// when either is the zero Stamp: a file whose version is not known).
func (s Stamp) Change(now Stamp) string {
	if s == (Stamp{}) || now == (Stamp{}) || s == now {
		return ""
	}
	switch {
	case s.Size != now.Size:
		return fmt.Sprintf("resized from %d to %d bytes", s.Size, now.Size)
	case s.Inode != now.Inode || s.Dev != now.Dev:
		return "replaced by another file"
	case s.MTime != now.MTime:
		return "modified at " + time.Unix(0, now.MTime).Format(time.RFC3339Nano)
	}
	return "modified"
}
