package termtext

import (
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"model.layers.0.mlp.gate.weight": "model.layers.0.mlp.gate.weight",
		"größe×128":                      "größe×128",
		"a\nb":                           `a\nb`,
		"evil\x1b[2Jname":                `evil\x1b[2Jname`,
		"tab\there":                      `tab\there`,
		"del\x7f":                        `del\x7f`,
		"c1\u0085x":                      `c1\u0085x`,
		"rtl\u202eoverride":              `rtl\u202eoverride`,
		"bad\xffutf8":                    `bad\xffutf8`,
		"\r":                             `\r`,
	} {
		if got := escape(in); got != want {
			t.Errorf("escape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLines(t *testing.T) {
	if got, want := Lines("line one\x1b]0;title\x07\nline two"), "line one\\x1b]0;title\\a\nline two"; got != want {
		t.Errorf("Lines = %q, want %q", got, want)
	}
}

func FuzzEscape(f *testing.F) {
	f.Add("model.layers.0\x1b[31m")
	f.Add("\xff\xfe\u202e")
	f.Fuzz(func(t *testing.T, s string) {
		e := escape(s)
		for _, r := range e {
			if unsafe(r) {
				t.Fatalf("escape(%q) = %q keeps %U", s, e, r)
			}
		}
		if !strings.ContainsFunc(s, unsafe) && e != s {
			t.Fatalf("Escape changed a clean string %q", s)
		}
	})
}

func TestInt(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567", 497220: "497,220", -9223372036854775808: "-9,223,372,036,854,775,808"} {
		if got := Int(n); got != want {
			t.Errorf("Int(%d) = %q, want %q", n, got, want)
		}
	}
	if got := Plural(1, "file", "files") + "; " + Plural(1200, "file", "files"); got != "1 file; 1,200 files" {
		t.Errorf("Plural: %q", got)
	}
}

func TestWrap(t *testing.T) {
	for _, c := range []struct {
		in    string
		width int
		want  string
	}{
		{"a bb ccc dddd", 6, "a bb\n  ccc\n  dddd"},
		{"a bb ccc", 8, "a bb ccc"},
		{"averyveryverylongword x", 5, "averyveryverylongword\n  x"},
		{"é é é", 3, "é é\n  é"},
	} {
		if got := Wrap(c.in, c.width, "  "); got != c.want {
			t.Errorf("Wrap(%q, %d) = %q, want %q", c.in, c.width, got, c.want)
		}
	}
}
