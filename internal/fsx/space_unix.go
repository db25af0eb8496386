//go:build linux || darwin

package fsx

import "golang.org/x/sys/unix"

// freeSpace asks statfs for the blocks an unprivileged writer may use.
func freeSpace(dir string) (int64, bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, err
	}
	return int64(st.Bavail) * int64(st.Bsize), true, nil
}
