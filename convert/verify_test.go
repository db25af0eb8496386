package convert

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rehash rewrites DST's manifest with the files' current sizes and hashes,
// as someone hiding a modification would.
func rehash(t *testing.T, dst string) {
	t.Helper()
	m, err := readManifest(dst)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range m.Files {
		b, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(f.Name)))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		m.Files[i].Size, m.Files[i].SHA256 = int64(len(b)), hex.EncodeToString(sum[:])
	}
	if err := localDest(dst).writeManifest(m); err != nil {
		t.Fatal(err)
	}
}

// verifyDst verifies dst as a conversion of the mini replica.
func verifyDst(t *testing.T, dst string) *VerifyReport {
	t.Helper()
	rep, err := Verify(context.Background(), openSrc(t, miniSrc), dst, VerifyOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A block scale changed by 0.1% (the manifest re-hashed) keeps the
// dequantization error within the FP8 bound, so only equality with a fresh
// quantization catches it.
func TestVerifyRequiresBitEqualScales(t *testing.T) {
	t.Parallel()
	dst := filepath.Join(t.TempDir(), "out")
	copyTree(t, miniRef, dst)
	out := openSrc(t, dst)
	const name = "language_model.model.layers.3.self_attn.q_b_proj.weight_scale_inv"
	f, st, ok := out.Lookup(name)
	if !ok {
		t.Fatal("no scale tensor")
	}
	path := filepath.Join(dst, f.Path)
	b, _ := os.ReadFile(path)
	at := f.DataStart + st.Begin
	v := math.Float32frombits(binary.LittleEndian.Uint32(b[at:]))
	binary.LittleEndian.PutUint32(b[at:], math.Float32bits(v*1.001))
	os.WriteFile(path, b, 0o644)
	out.Close()
	rehash(t, dst)
	rep := verifyDst(t, dst)
	joined := strings.Join(rep.Violations, "\n")
	if rep.OK || !strings.Contains(joined, "q_b_proj.weight: block scale 0 is") || strings.Contains(joined, "beyond the FP8 rounding bound") {
		t.Fatalf("scale off by 0.1%%: ok %v\n%s", rep.OK, joined)
	}
}

// Files in DST that the conversion did not write fail verify: custom code an
// engine would run, a quantization config an engine would read, another shard.
func TestVerifyStrayFiles(t *testing.T) {
	t.Parallel()
	dst := filepath.Join(t.TempDir(), "out")
	copyTree(t, miniRef, dst)
	os.WriteFile(filepath.Join(dst, "evil.py"), []byte("import os\n"), 0o644)
	os.WriteFile(filepath.Join(dst, HFQuantConfigName), []byte("{}\n"), 0o644) // deepseek convention: no such file
	os.MkdirAll(filepath.Join(dst, "sub"), 0o755)
	os.WriteFile(filepath.Join(dst, "sub", "x.safetensors"), []byte("x"), 0o644)
	os.Symlink("/etc/hostname", filepath.Join(dst, "link"))
	rep := verifyDst(t, dst)
	joined := strings.Join(rep.Violations, "\n")
	for _, name := range []string{"evil.py", HFQuantConfigName, "sub/x.safetensors", "link"} {
		if !strings.Contains(joined, name+": stray file") {
			t.Errorf("%s not reported:\n%s", name, joined)
		}
	}
	if rep.OK {
		t.Error("verify passed with stray files")
	}
}

// A manifest that names files outside DST is refused before anything is hashed.
func TestVerifyManifestPathsInsideDst(t *testing.T) {
	t.Parallel()
	dst := filepath.Join(t.TempDir(), "out")
	copyTree(t, miniRef, dst)
	m, err := readManifest(dst)
	if err != nil {
		t.Fatal(err)
	}
	files := m.Files
	for _, bad := range []string{"../../etc/hostname", "/etc/hostname", "a/../../b", `..\x`} {
		m.Files = append(slices.Clip(files), fileRecord{Name: bad, Size: 1, SHA256: strings.Repeat("0", 64)})
		if err := localDest(dst).writeManifest(m); err != nil {
			t.Fatal(err)
		}
		_, err := Verify(context.Background(), openSrc(t, miniSrc), dst, VerifyOptions{})
		if !errors.Is(err, ErrDestination) || !strings.Contains(err.Error(), "not a path inside the destination") {
			t.Errorf("manifest entry %q: %v", bad, err)
		}
	}
}
