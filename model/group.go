package model

import (
	"fmt"
	"slices"
	"strings"
)

// Group is a named set of tensors that recipes and layouts address as one
// (a projection kind, a norm kind, the routed experts…); companions belong
// to their weight's group, and each group to one Component.
type Group uint8

// The groups the package names; families/k3.json lists all of the built-in
// family's in Group order, and their names are stable: recipes and layouts
// name groups in data.
const (
	// groupOther holds tensors the schema does not know.
	groupOther Group = 0
	// GroupExperts is the routed experts (w1 gate, w2 down, w3 up).
	GroupExperts Group = 32
	// numK3Groups is the number of the built-in family's groups, for arrays
	// indexed by Group (another family's groups come after them).
	numK3Groups = 40
)

// groupInfo is every group's name and component: the built-in family's,
// then those other families add (only while loading schemas, at start-up).
var groupInfo []groupDef

// internGroup returns the group of a name, adding it when no family has it.
func internGroup(name string, comp Component) (Group, error) {
	if g, err := ParseGroup(name); err == nil {
		if g.Component() != comp {
			return 0, fmt.Errorf("group %q is %s, not %s", name, g.Component(), comp)
		}
		return g, nil
	}
	if len(groupInfo) == 64 {
		return 0, fmt.Errorf("group %q: more than 64 groups in all", name)
	}
	groupInfo = append(groupInfo, groupDef{name, comp})
	return Group(len(groupInfo) - 1), nil
}

// String is the group's stable name, e.g. "kda.q_proj", "shared_experts.down_proj".
func (g Group) String() string {
	if int(g) < len(groupInfo) {
		return groupInfo[g].name
	}
	return fmt.Sprintf("Group(%d)", uint8(g))
}

// Component is the accounting class the group's tensors are counted in.
func (g Group) Component() Component {
	if int(g) < len(groupInfo) {
		return groupInfo[g].comp
	}
	return Other
}

// ParseGroup maps a group's name back to the group.
func ParseGroup(s string) (Group, error) {
	if i := slices.IndexFunc(groupInfo, func(d groupDef) bool { return d.name == s }); i >= 0 {
		return Group(i), nil
	}
	return groupOther, fmt.Errorf("model: unknown tensor group %q", s)
}

// GroupSet is a set of groups.
type GroupSet uint64

// Groups builds a set from its members.
func Groups(gs ...Group) GroupSet {
	var s GroupSet
	for _, g := range gs {
		s |= 1 << g
	}
	return s
}

// AllGroups is every group of every loaded family but GroupOther.
func AllGroups() GroupSet { return GroupSet(1<<len(groupInfo)-1) &^ 1 }

// NumAllGroups is how many groups the loaded families have in all (Group
// values are below it), for tables indexed by Group.
func NumAllGroups() int { return len(groupInfo) }

// Has reports whether g is in the set.
func (s GroupSet) Has(g Group) bool { return g < 64 && s&(1<<g) != 0 }

// String lists the members' names in Group order, comma separated (what
// ParseGroupSet reads).
func (s GroupSet) String() string {
	var names []string
	for g := range Group(len(groupInfo)) {
		if s.Has(g) {
			names = append(names, g.String())
		}
	}
	return strings.Join(names, ",")
}

// ParseGroupSet reads a comma-separated list of group names; a family name
// ("kda", "router"…) stands for all of its groups, spaces around names are
// ignored, and an empty list is the empty set.
func ParseGroupSet(list string) (GroupSet, error) {
	var s GroupSet
	if strings.TrimSpace(list) == "" {
		return 0, nil
	}
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if g, err := ParseGroup(item); err == nil {
			s |= Groups(g)
			continue
		}
		var members GroupSet // of the family named item
		for g := range Group(len(groupInfo)) {
			if fam, _, ok := strings.Cut(g.String(), "."); g != groupOther && ok && fam == item {
				members |= Groups(g)
			}
		}
		if members == 0 {
			return 0, fmt.Errorf("model: unknown tensor group %q", item)
		}
		s |= members
	}
	return s, nil
}
