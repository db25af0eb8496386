package inspect

import (
	"fmt"
	"slices"
)

// groupBy selects the rows of a report's main table, as --by and JSON name it.
type groupBy string

const (
	byComponent groupBy = "component" // the schema's component class ((*model.Classifier).Classify)
	byDType     groupBy = "dtype"     // the safetensors dtype
	byLayer     groupBy = "layer"     // decoder layer; model-level tensors form their own row
	byStage     groupBy = "stage"     // resident bytes by pipeline stage of a layout (pp16 unless --layout)
	byRank      groupBy = "rank"      // resident bytes by GPU rank of a layout (dp16 unless --layout)
	byFile      groupBy = "file"      // the shard file that holds the tensors
)

var groupBys = []groupBy{byComponent, byDType, byLayer, byStage, byRank, byFile}

// ParseGroupBy maps a --by value to its groupBy.
func ParseGroupBy(s string) (groupBy, error) {
	if g := groupBy(s); slices.Contains(groupBys, g) {
		return g, nil
	}
	return "", fmt.Errorf("%w: --by %q (want one of %v)", errUsage, s, groupBys)
}
