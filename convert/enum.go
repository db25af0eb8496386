package convert

import (
	"fmt"
	"strings"
)

// enum is the type of convert's small closed sets, spelled by name in
// flags, plans and manifests; S names the set.
type enum[S enumSet] uint8

// enumSet describes one enum: its names by value, its type name (for a value
// out of range) and what it is called in errors.
type enumSet interface {
	set() (names []string, typ, what string)
}

// String is the value's name.
func (e enum[S]) String() string {
	var s S
	names, typ, _ := s.set()
	if int(e) < len(names) {
		return names[e]
	}
	return fmt.Sprintf("%s(%d)", typ, uint8(e))
}

// MarshalText writes the name.
func (e enum[S]) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// UnmarshalText parses a name.
func (e *enum[S]) UnmarshalText(b []byte) error {
	v, err := parseEnum[S](string(b))
	if err == nil {
		*e = v
	}
	return err
}

// parseEnum maps a name to its value.
func parseEnum[S enumSet](name string) (enum[S], error) {
	var s S
	names, _, what := s.set()
	return parseName[enum[S]](what, name, len(names))
}

// parseName maps a name to the one of the n values of T whose String it is.
func parseName[T interface {
	~uint8
	String() string
}](what, name string, n int) (T, error) {
	names := make([]string, n)
	for i := range names {
		if names[i] = T(i).String(); names[i] == name {
			return T(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %s %q (known: %s)", errUnknownFormat, what, name, strings.Join(names, ", "))
}
