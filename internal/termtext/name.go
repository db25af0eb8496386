package termtext

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Name returns s unchanged when every rune is printable (letters, marks,
// numbers, punctuation, symbols, the ASCII space) and s has no quote or
// backslash, so ordinary names read as they are; otherwise it returns s in
// Go-quoted form (as %q prints it), in which every control, format (such as
// bidirectional overrides) and invalid byte is escaped. The empty string
// prints as "".
func Name(s string) string {
	if s == "" {
		return `""`
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f || c == '"' || c == '\\' {
				return strconv.Quote(s)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
		i += n
	}
	return s
}
