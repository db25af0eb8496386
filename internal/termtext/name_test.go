package termtext

import "testing"

func TestName(t *testing.T) {
	for in, want := range map[string]string{
		"model.layers.0.mlp.w": "model.layers.0.mlp.w",
		"é😀 x":                 "é😀 x",
		"a\x1b[31mred":         `"a\x1b[31mred"`,
		"line\nbreak":          `"line\nbreak"`,
		"bidi\u202eevil":       `"bidi\u202eevil"`,
		"bad\xffutf8":          `"bad\xffutf8"`,
		`quo"te`:               `"quo\"te"`,
		"del\x7f":              `"del\x7f"`,
		"":                     `""`,
		"tab\there":            `"tab\there"`,
		"nbsp\u00a0":           `"nbsp\u00a0"`,
	} {
		if got := Name(in); got != want {
			t.Errorf("Name(%q) = %s, want %s", in, got, want)
		}
	}
}
