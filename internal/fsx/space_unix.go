//go:build linux || darwin

package fsx

import "golang.org/x/sys/unix"

// FreeSpace is the space an unprivileged writer may still use on dir's
// filesystem (statfs); false when it cannot be known.
func FreeSpace(dir string) (int64, bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, err
	}
	return int64(st.Bavail) * int64(st.Bsize), true, nil
}
