//go:build !linux

package filewrite

// mapBuffer maps nothing here: buffers come from Go's heap.
func mapBuffer(int) []byte { return nil }

func unmapBuffer([]byte) {}
