//go:build amd64

package quant

import "testing"

// eachKernel runs f with the AVX-512 and AVX2 kernels (where the CPU has
// them) and with the portable ones, so all are held to the same goldens.
//
// Under -short only the kernel this machine selects runs: TestKernelsAgree
// still compares it with the portable one on odd shapes, and the full run
// puts every kernel through f.
func eachKernel(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved, saved512 := useAVX2, useAVX512
	defer func() { useAVX2, useAVX512 = saved, saved512 }()
	if saved && saved512 {
		if t.Run("avx512", f); testing.Short() {
			return
		}
	}
	useAVX512 = false
	if saved {
		if t.Run("avx2", f); testing.Short() {
			return
		}
	}
	useAVX2 = false
	t.Run("go", f)
}

func useAVX2Available() bool { return cpuHasAVX2 }

func setAVX2(on bool) { useAVX2 = on && cpuHasAVX2 }

func avx512Available() bool { return cpuHasAVX512 }

func setAVX512(on bool) { useAVX512 = on && cpuHasAVX512 }
