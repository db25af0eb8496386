package layout

import (
	"fmt"
	"strconv"
	"strings"
)

// ParsePartition reads a SGLANG_PP_LAYER_PARTITION value such as
// "7,5,7,5,7,5,7,5,7,5,7,5,7,5,6,3".
func ParsePartition(s string) ([]int, error) {
	parts := strings.Split(s, ",")
	if len(parts) > maxRanks {
		return nil, fmt.Errorf("%w: %d entries (limit %d)", errPartition, len(parts), maxRanks)
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("%w: invalid partition string: %q", errPartition, s)
		}
		out[i] = v
	}
	return out, nil
}

// checkPartition validates a partition as SGLang's get_pp_indices does
// (same messages), and rejects empty stages, on which SGLang fails at load.
func checkPartition(p []int, stages, layers int) error {
	if len(p) != stages {
		return fmt.Errorf("%w: len(partitions)=%d does not match pp_size=%d", errPartition, len(p), stages)
	}
	sum := 0
	for i, v := range p {
		if v <= 0 {
			return fmt.Errorf("%w: partition entry %d (stage %d) is %d; every stage needs at least one layer", errPartition, i, i, v)
		}
		sum += v
		if sum > 1<<30 {
			return fmt.Errorf("%w: partition sum overflows", errPartition)
		}
	}
	if sum != layers {
		return fmt.Errorf("%w: sum(partitions)=%d does not match num_hidden_layers=%d", errPartition, sum, layers)
	}
	return nil
}

// defaultPartition is SGLang's split when SGLANG_PP_LAYER_PARTITION is unset:
// every stage gets layers/stages layers and the last layers%stages stages one more.
func defaultPartition(layers, stages int) ([]int, error) {
	if stages < 1 || stages > maxRanks {
		return nil, fmt.Errorf("%w: pp_size=%d", errPartition, stages)
	}
	if layers < stages {
		return nil, fmt.Errorf("%w: num_hidden_layers=%d is fewer than pp_size=%d", errPartition, layers, stages)
	}
	base, rem := layers/stages, layers%stages
	p := make([]int, stages)
	for s := range p {
		p[s] = base
		if s >= stages-rem {
			p[s]++
		}
	}
	return p, nil
}

// blockPartition gives every stage but the last one AttnRes block of
// layers, and the last the rest (defaultPartition when none are left).
func blockPartition(layers, stages, block int) ([]int, error) {
	if block < 1 || stages < 1 || layers <= block*(stages-1) {
		return defaultPartition(layers, stages)
	}
	p := make([]int, stages)
	for s := range p {
		p[s] = block
	}
	p[stages-1] = layers - block*(stages-1)
	return p, nil
}
