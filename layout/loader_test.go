package layout

import (
	"strings"
	"testing"
)

// Every rank directory's layout.json says it is input for a loader that
// knows the layout, and a packed-scale export says no stock engine reads
// its scales.
func TestManifestNamesItsLoader(t *testing.T) {
	t.Parallel()
	_, fp := tinyCatalogs()
	src, _ := fakeSource(t, nil, fp, layerFiles(int(tinyDims.layers)))
	l, err := builtinLayout("dp2-dcp8", tinyDims.model(), Options{TextOnly: true, VocabTP: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, pack := range []packFormat{packNone, packUE8M0} {
		p, err := PlanExport(src, l, ExportOptions{Pack: pack, Ranks: []int{0, 9}})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range p.Dirs {
			note := d.man.Loader
			if !strings.Contains(note, "loader that knows this layout") || !strings.Contains(note, "ShardedStateLoader") {
				t.Errorf("%s: loader note %q", d.Dir, note)
			}
			if got := strings.Contains(note, "no stock engine reads"); got != (pack == packUE8M0) {
				t.Errorf("%s (pack %q): packed-scale warning present = %v", d.Dir, pack, got)
			}
		}
	}
}
