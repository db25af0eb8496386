package termtext

import (
	"strings"
	"unicode/utf8"
)

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
