//go:build amd64

package quant

import "testing"

// eachKernel runs f with the vector kernels (where the CPU has them) and with
// the portable ones, so both are held to the same goldens.
func eachKernel(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	if saved {
		useAVX2 = true
		t.Run("avx2", f)
	}
	useAVX2 = false
	t.Run("go", f)
}

func useAVX2Available() bool { return cpuHasAVX2 }

func setAVX2(on bool) { useAVX2 = on && cpuHasAVX2 }
