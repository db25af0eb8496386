//go:build amd64 && !purego

package sha256x

import "golang.org/x/sys/cpu"

//go:noescape
func block1(h *[8]uint32, p *byte, n int)

//go:noescape
func block2(ha, hb *[8]uint32, pa, pb *byte, n int)

func cpuidSHA() bool

// hasSHA reports the SHA extensions and the SSE levels the block functions use.
var hasSHA = cpu.X86.HasSSSE3 && cpu.X86.HasSSE41 && cpuidSHA()
