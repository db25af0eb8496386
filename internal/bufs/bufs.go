// Package bufs holds the one helper every streaming loop needs: reuse a
// scratch slice when it is large enough instead of allocating per chunk.
package bufs

// Grow returns b resliced to n elements, allocating only when its capacity is
// too small. The contents are not preserved or cleared.
func Grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}
