package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes parseSize accepts: binary (KiB…TiB, the tool's
// units) and decimal (KB…TB, the units GPU data sheets often use).
var sizeUnits = []struct {
	suffix string
	bytes  float64
}{
	{"TIB", 1 << 40}, {"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// parseSize reads a byte count such as "141GiB", "80GB" or "1.5TiB".
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 0.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.bytes
			break
		}
	}
	if mult == 0 {
		return 0, fmt.Errorf("size %q needs a unit (e.g. 141GiB, 80GB)", s)
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || v <= 0 || math.IsInf(v, 0) || v*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: want a positive number and a unit (e.g. 141GiB)", s)
	}
	return int64(v * mult), nil
}
