package model

import (
	"encoding/binary"
	"fmt"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// rawFilled reports whether synth writes tensors of dtype d as seeded
// codes rather than drawn values: DeepSeek-V4's FP8 weights with their
// X.scale, its FP4 experts (I8: two E2M1 codes a byte), E8M0 scales and
// the I64 token-to-expert tables.
func rawFilled(d safetensors.DType) bool {
	switch d.String() {
	case "F8_E4M3", "F8_E8M0", "I8", "I64":
		return true
	}
	return false
}

// fillRaw writes seeded codes: any byte for FP4 pairs; an E4M3 code that is
// not NaN; an E8M0 exponent in 2^-8..2^-1 (so weight × scale stays near the
// drawn weights' range); an I64 table entry in [0, experts).
func (s *synth) fillRaw(w *safetensors.Writer, ts safetensors.TensorSpec, buf *synthBuf) error {
	experts := s.cfg.NumExperts
	if ts.DType.String() == "I64" && experts <= 0 {
		return fmt.Errorf("tensor %s: an I64 expert table needs experts in the config", ts.Name)
	}
	r := tensorStream(s.opts.Seed, ts.Name)
	return writeChunks(w, ts, buf, func(b []byte, _ int64) {
		for j := range len(b) / int(ts.DType.Bits()/8) {
			v := r.next()
			switch ts.DType.String() {
			case "F8_E4M3":
				if c := byte(v); c&0x7f == 0x7f {
					b[j] = c &^ 1
				} else {
					b[j] = c
				}
			case "F8_E8M0":
				b[j] = byte(127 - 8 + v%8)
			case "I64":
				binary.LittleEndian.PutUint64(b[8*j:], v%uint64(experts))
			default:
				b[j] = byte(v)
			}
		}
	})
}
