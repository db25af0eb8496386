package termtext

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Name returns s unchanged when every rune is printable (letters, marks,
// numbers, punctuation, symbols, the ASCII space) and s has no quote or
// backslash; otherwise, and for "", it returns s as %q prints it, every
// control, format (such as bidirectional overrides) and invalid byte escaped.
func Name(s string) string {
	if s == "" || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool {
		return r == '"' || r == '\\' || !unicode.IsPrint(r)
	}) {
		return strconv.Quote(s)
	}
	return s
}
