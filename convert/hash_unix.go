//go:build linux || darwin

package convert

import (
	"hash"
	"os"

	"golang.org/x/sys/unix"
)

// hashWindow is how much of a file hashMapped maps at once: hashing reads the
// page cache in place (a copy into a buffer costs as much as the hash on a
// memory-bound machine), and unmapping each window bounds the resident set.
const hashWindow = 4 << 20

// hashMapped hashes f's first size bytes through memory maps and returns how
// far it got (less than size when the kernel refuses to map the file).
func hashMapped(f *os.File, size int64, h hash.Hash, progress func(int64)) int64 {
	for off := int64(0); off < size; off += hashWindow {
		n := int(min(hashWindow, size-off))
		m, err := unix.Mmap(int(f.Fd()), off, n, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return off
		}
		unix.Madvise(m, unix.MADV_SEQUENTIAL)
		h.Write(m)
		unix.Munmap(m)
		if progress != nil {
			progress(int64(n))
		}
	}
	return size
}
