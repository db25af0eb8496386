package main

import (
	"path/filepath"
	"testing"
)

// TestInspectWhatIfBF16: inspect's what-if for the way back sizes the output
// exactly as convert plans it (the tensor bytes of --dry-run), and the BF16
// masters are larger than the release by the decoded experts.
func TestInspectWhatIfBF16(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	src := headerOnlyReplica(t)
	for _, args := range [][]string{
		{"--recipe", "bf16", "--experts", "bf16"},
		{"--recipe", "bf16", "--experts", "keep"},
		{"--recipe", "attn-moe-dense-fp8", "--experts", "bf16"},
	} {
		o, e, code := k3(append([]string{"inspect", src, "--json"}, args...)...)
		m := decodeSchema(t, "inspect", o)
		if code != 0 {
			t.Fatalf("inspect %v: exit %d: %s", args, code, e)
		}
		r := m["recipe"].(map[string]any)
		o, e, code = k3(append([]string{"convert", src, filepath.Join(t.TempDir(), "o"), "--dry-run", "--json"}, args...)...)
		c := decodeSchema(t, "convert", o)
		if code != 0 {
			t.Fatalf("convert %v: exit %d: %s", args, code, e)
		}
		plan := c["totals"].(map[string]any)["OutputBytes"].(float64)
		if r["total_bytes"].(float64) != plan {
			t.Errorf("%v: inspect says %v bytes, convert plans %v", args, r["total_bytes"], plan)
		}
		if args[3] == "bf16" && plan <= m["total_bytes"].(float64) {
			t.Errorf("%v: BF16 experts (%v bytes) not larger than the release (%v)", args, plan, m["total_bytes"])
		}
	}
}
