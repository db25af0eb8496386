//go:build linux

package filewrite

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page where Go runs Linux with
// 4 KiB pages (x86-64, arm64).
const hugePage = 2 << 20

// mapBuffer maps n bytes (a multiple of the page size) outside Go's heap,
// aligned to and advised for huge pages: a direct write from 4 KiB pages
// reaches the device as many small requests, from 2 MiB pages as a few large
// ones. It returns nil when the mapping fails; the advice is only a hint.
func mapBuffer(n int) []byte {
	m, err := unix.MmapPtr(-1, 0, nil, uintptr(n+hugePage), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil
	}
	base := uintptr(m)
	start := (base + hugePage - 1) &^ (hugePage - 1)
	end := base + uintptr(n+hugePage)
	// Keep exactly [start, start+n): the slop before and after goes back.
	if start > base {
		_ = unix.MunmapPtr(m, start-base) // a failure only leaves the slop mapped
	}
	if end > start+uintptr(n) {
		_ = unix.MunmapPtr(unsafe.Add(m, start+uintptr(n)-base), end-start-uintptr(n))
	}
	p := unsafe.Add(m, start-base)
	_ = unix.Madvise(unsafe.Slice((*byte)(p), n), unix.MADV_HUGEPAGE)
	return unsafe.Slice((*byte)(p), n)
}

// unmapBuffer releases a buffer of mapBuffer.
func unmapBuffer(b []byte) {
	_ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)))
}
