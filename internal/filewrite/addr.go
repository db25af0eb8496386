package filewrite

import "unsafe"

// addr is the address of b's first byte, to align staging buffers (Go's heap
// does not move objects).
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
