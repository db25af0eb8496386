package layout

import (
	"fmt"
	"slices"
	"strings"
)

// selectRanks checks a rank selection against the world size n (nil: all).
func selectRanks(sel []int, n int) ([]int, error) {
	if sel == nil {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	seen := map[int]bool{}
	for _, r := range sel {
		if r < 0 || r >= n {
			return nil, fmt.Errorf("%w: rank %d not in [0, %d)", errRank, r, n)
		}
		if seen[r] {
			return nil, fmt.Errorf("%w: rank %d listed twice", errRank, r)
		}
		seen[r] = true
	}
	return slices.Sorted(slices.Values(sel)), nil
}

// ParseRanks reads a rank list such as "0,3,8-11".
func ParseRanks(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		var a, b int
		if _, err := fmt.Sscanf(f, "%d-%d", &a, &b); err == nil && strings.Count(f, "-") == 1 {
			if b < a || b-a > maxRanks {
				return nil, fmt.Errorf("%w: bad range %q", errRank, f)
			}
			for r := a; r <= b; r++ {
				out = append(out, r)
			}
			continue
		}
		if _, err := fmt.Sscanf(f, "%d", &a); err != nil || fmt.Sprint(a) != f {
			return nil, fmt.Errorf("%w: bad rank %q in %q", errRank, f, s)
		}
		out = append(out, a)
	}
	return out, nil
}
