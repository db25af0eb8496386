// Package inspect audits a safetensors checkpoint from its headers alone: it
// reads the shard headers, config.json and the index (never tensor data) and
// accounts tensors and bytes per component, dtype, layer, file, pipeline stage
// and GPU rank; it answers what-if questions (a conversion recipe, a deployment
// layout) by planning them with the convert and layout packages, and renders
// tables, JSON and an SVG chart of per-rank weight memory.
//
// Classification, recipes and layouts each have one definition elsewhere
// ((*model.Classifier).Classify, convert.PlanTensors, layout.Layout.Place); this package only sums.
package inspect

import "strconv"

// giB is the unit of the tables: 2^30 bytes.
const giB = 1 << 30

var gibUnit = unit{"GiB", giB}

// unit is how a table or chart shows byte counts.
type unit struct {
	name string
	size float64
}

// unitFor picks MiB when even the largest figure is under 1 GiB, so a tiny
// replica's tables do not read 0.00 everywhere; GiB otherwise.
func unitFor(largest int64) unit {
	if largest < giB {
		return unit{"MiB", 1 << 20}
	}
	return gibUnit
}

func (u unit) of(b int64) float64 { return float64(b) / u.size }

// str formats bytes with two decimals.
func (u unit) str(b int64) string { return strconv.FormatFloat(u.of(b), 'f', 2, 64) }
