package inspect

import (
	"fmt"
	"slices"
)

// groupBy selects the rows of the main table of a report; its value is the
// name --by takes and JSON reports carry.
type groupBy string

const (
	// byComponent groups tensors by the schema's component class ((*model.Classifier).Classify).
	byComponent groupBy = "component"
	// byDType groups tensors by their safetensors dtype.
	byDType groupBy = "dtype"
	// byLayer groups tensors by decoder layer; model-level tensors form their own row.
	byLayer groupBy = "layer"
	// byStage groups resident bytes by pipeline stage of a stage layout (pp16 unless --layout says otherwise).
	byStage groupBy = "stage"
	// byRank groups resident bytes by GPU rank of a rank layout (dp16 unless --layout says otherwise).
	byRank groupBy = "rank"
	// byFile groups tensors by the shard file that holds them.
	byFile groupBy = "file"
)

var groupBys = []groupBy{byComponent, byDType, byLayer, byStage, byRank, byFile}

// ParseGroupBy maps a --by value to its groupBy.
func ParseGroupBy(s string) (groupBy, error) {
	if g := groupBy(s); slices.Contains(groupBys, g) {
		return g, nil
	}
	return "", fmt.Errorf("%w: --by %q (want one of %v)", errUsage, s, groupBys)
}
