// Package termtext makes text safe and readable on a terminal or in a log.
// Strings that come from files are quoted where a message names them (Name):
// a terminal escape, a newline or invalid UTF-8 must not reach a terminal as
// it is. Lines is the last line of defence for a whole message: control
// characters are shown as Go escapes. Int, Plural and Wrap format counts and
// tables.
package termtext

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// escape returns s with every control character (C0, DEL, C1, and the
// Unicode format characters that reorder text) and every invalid UTF-8 byte
// written as a Go escape (\n, \x1b, \u202e); s itself when it has none.
func escape(s string) string {
	if !strings.ContainsFunc(s, unsafe) { // an invalid byte ranges as RuneError
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafe(r):
			q := strconv.QuoteRuneToASCII(r) // 'x' with the escape inside
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Lines is escape for multi-line messages: newlines are kept, every other
// control character escaped.
func Lines(s string) string {
	parts := strings.Split(s, "\n")
	for i, p := range parts {
		parts[i] = escape(p)
	}
	return strings.Join(parts, "\n")
}

func unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError
}

// Int writes an integer with thousands separators ("1,453,660").
func Int(n int64) string {
	s := strconv.FormatInt(n, 10)
	digits := strings.TrimPrefix(s, "-")
	var b strings.Builder
	b.WriteString(s[:len(s)-len(digits)])
	for i := range len(digits) {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(digits[i])
	}
	return b.String()
}

// Plural writes n with thousands separators and the noun in the number's
// form ("1 file", "1,234 files").
func Plural(n int64, one, many string) string {
	if n == 1 || n == -1 {
		return Int(n) + " " + one
	}
	return Int(n) + " " + many
}

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

// Wrap breaks s at spaces so that no line passes width columns (a longer word
// keeps its own line, never cut); continuation lines start with indent.
func Wrap(s string, width int, indent string) string {
	words := strings.Split(s, " ")
	var b strings.Builder
	col := 0
	for i, wd := range words {
		n := utf8.RuneCountInString(wd)
		switch {
		case i == 0:
		case col+1+n > width:
			b.WriteString("\n" + indent)
			col = utf8.RuneCountInString(indent)
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(wd)
		col += n
	}
	return b.String()
}
