package layout

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// A run that needs more than DST's free space is refused before it writes a
// byte of data, saying how much it needs; --no-space-check writes anyway;
// what a rerun keeps needs no space.
func TestFreeSpaceChecked(t *testing.T) {
	tmp, p, _, _ := ownedFixture(t)
	ctx := context.Background()
	free := int64(1000)
	was := freeSpace
	freeSpace = func(string) (int64, bool, error) { return free, true, nil }
	defer func() { freeSpace = was }()
	dst := filepath.Join(tmp, "full")
	_, err := p.Execute(ctx, dst, ExecOptions{})
	if !errors.Is(err, errNoSpace) || !strings.Contains(err.Error(), "1000 bytes") || !strings.Contains(err.Error(), "--no-space-check") {
		t.Fatalf("full disk: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dst, "*", "*.safetensors")); len(m) > 0 {
		t.Errorf("a refused run wrote %v", m)
	}
	must(p.Execute(ctx, dst, ExecOptions{NoSpaceCheck: true}))(t)
	free = 0
	if res, err := p.Execute(ctx, dst, ExecOptions{}); err != nil || res.Written != 0 {
		t.Errorf("rerun of a finished export on a full disk: %+v %v", res, err)
	}
}
