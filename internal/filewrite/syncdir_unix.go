//go:build !windows

package filewrite

import (
	"errors"
	"fmt"
	"os"
)

// syncDirectory fsyncs a directory so a rename inside it is durable.
func syncDirectory(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
