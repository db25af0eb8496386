// Package inspect audits a safetensors checkpoint from its headers alone: it
// reads the shard headers, config.json and the index (never tensor data) and
// accounts tensors and bytes per component, dtype, layer, file, pipeline stage
// and GPU rank; it answers what-if questions (a conversion recipe, a deployment
// layout) by planning them with the convert and layout packages, and renders
// tables, JSON and an SVG chart of per-rank weight memory.
//
// Classification, recipes and layouts each have one definition elsewhere
// (model.Classify, convert.PlanTensors, layout.Plan); this package only sums.
package inspect

// GiB is the unit of every table: 2^30 bytes.
const GiB = 1 << 30

// gib converts bytes to GiB for display.
func gib(b int64) float64 { return float64(b) / GiB }
