//go:build linux || darwin

package convert

import "golang.org/x/sys/unix"

// freeSpace is the space an unprivileged writer may still use on dir's filesystem.
func freeSpace(dir string) (int64, bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, err
	}
	return int64(st.Bavail) * int64(st.Bsize), true, nil
}
