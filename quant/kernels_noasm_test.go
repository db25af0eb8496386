//go:build !amd64

package quant

import "testing"

// eachKernel runs f once: this architecture has only the portable kernels.
func eachKernel(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	t.Run("go", f)
}

func useAVX2Available() bool { return false }

func setAVX2(bool) {}

func avx512Available() bool { return false }

func setAVX512(bool) {}
