package inspect

import "fmt"

// groupBy selects the rows of the main table of a report.
type groupBy uint8

const (
	// ByComponent groups tensors by the schema's component class ((*model.Classifier).Classify).
	ByComponent groupBy = iota
	// byDType groups tensors by their safetensors dtype.
	byDType
	// byLayer groups tensors by decoder layer; model-level tensors form their own row.
	byLayer
	// byStage groups resident bytes by pipeline stage of a stage layout (pp16 unless --layout says otherwise).
	byStage
	// byRank groups resident bytes by GPU rank of a rank layout (dp16 unless --layout says otherwise).
	byRank
	// byFile groups tensors by the shard file that holds them.
	byFile

	numGroupBy = int(byFile) + 1
)

var groupByNames = [numGroupBy]string{
	ByComponent: "component", byDType: "dtype", byLayer: "layer",
	byStage: "stage", byRank: "rank", byFile: "file",
}

// String returns the name used by --by and in JSON.
func (g groupBy) String() string {
	if int(g) < numGroupBy {
		return groupByNames[g]
	}
	return fmt.Sprintf("GroupBy(%d)", uint8(g))
}

// ParseGroupBy maps a --by value to its GroupBy.
func ParseGroupBy(s string) (groupBy, error) {
	for i, n := range groupByNames {
		if n == s {
			return groupBy(i), nil
		}
	}
	return 0, fmt.Errorf("%w: --by %q (want one of %v)", errUsage, s, groupByNames)
}

// MarshalText writes the --by name, so GroupBy serializes as a string in JSON.
func (g groupBy) MarshalText() ([]byte, error) {
	if int(g) >= numGroupBy {
		return nil, fmt.Errorf("%w: group %d", errUsage, uint8(g))
	}
	return []byte(g.String()), nil
}

// UnmarshalText parses a --by name, so a JSON report reads back.
func (g *groupBy) UnmarshalText(b []byte) error {
	v, err := ParseGroupBy(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}
