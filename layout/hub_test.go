package layout

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
	st "github.com/k3ckpt/k3ckpt/safetensors"
)

// hubSnapshot lays a header-only replica out as huggingface_hub's cache does
// (testckpt.HubCache), with a tokenizer file at the root and one in a
// subfolder (linked from one level deeper, ../../../blobs/). The replica is
// the tiny one cut to 16 layers (one per pp16 stage; 19 shards instead of
// 96): what is tested is reading through the cache's links, which the
// number of shards does not change, and every shard is exported twice and
// reassembled twice.
func hubSnapshot(t *testing.T) (snap, repo string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "plain")
	cfg := testckpt.LayersConfigJSON(t, model.ScaleTiny, 16)
	check(t, model.Synth(src, model.SynthOptions{Config: cfg, HeaderOnly: true, Seed: 5}))
	check(t, os.WriteFile(filepath.Join(src, "tiktoken.model"), []byte("tiktoken ranks\n"), 0o644))
	check(t, os.MkdirAll(filepath.Join(src, "figures"), 0o755))
	check(t, os.WriteFile(filepath.Join(src, "figures", "logo.txt"), []byte("a logo"), 0o644))
	return testckpt.HubCache(t, src)
}

// A hub cache snapshot is read as it is, side files included: shard (pp16),
// export (dp16) and reassembly of each carry config.json and the tokenizer
// files (through their blob links) and rebuild the snapshot's tensors, index
// and side files byte for byte. A side file linking out of the repository
// folder is refused, naming it and what is allowed.
func TestHubCacheSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	snap, repo := hubSnapshot(t)
	read := func(p string) []byte { return must(os.ReadFile(p))(t) }
	ctx := context.Background()
	for _, name := range []string{"pp16", "dp16"} {
		src := must(OpenSource(snap))(t)
		defer src.Close()
		for _, side := range []string{model.ConfigName, "tiktoken.model", "figures/logo.txt"} {
			if _, ok := src.aux[side]; !ok {
				t.Fatalf("%s: side file %s not read from the snapshot (have %d)", name, side, len(src.aux))
			}
		}
		o := must(DefaultOptions(name))(t)
		o.TextOnly = false // lossless, so the reassembly is the whole snapshot
		l := must(builtinLayout(name, must(src.Model())(t), o))(t)
		dst := filepath.Join(t.TempDir(), name)
		p := must(PlanExport(src, l, ExportOptions{}))(t)
		must(p.Execute(ctx, dst, ExecOptions{}))(t)
		if name == "pp16" {
			// The side files' subfolder does not stop a rerun or a restart.
			if res := must(p.Execute(ctx, dst, ExecOptions{}))(t); res.Written != 0 {
				t.Errorf("pp16: rerun of the finished shard wrote %d files", res.Written)
			}
			must(p.Execute(ctx, dst, ExecOptions{Restart: true}))(t)
		}
		d0 := filepath.Join(dst, p.Dirs[0].Dir)
		for _, side := range []string{"tiktoken.model", "figures/logo.txt"} {
			if !bytes.Equal(read(filepath.Join(d0, side)), read(filepath.Join(snap, side))) {
				t.Errorf("%s: %s/%s differs from the snapshot's", name, p.Dirs[0].Dir, side)
			}
		}
		if name == "dp16" && !bytes.Equal(read(filepath.Join(d0, model.ConfigName)), read(filepath.Join(snap, model.ConfigName))) {
			t.Errorf("dp16: config.json differs from the snapshot's")
		}
		// reassemble --check: the rebuilt checkpoint against the snapshot.
		out := filepath.Join(t.TempDir(), "re")
		must(runReassemble(dst, out))(t)
		for _, f := range []string{st.IndexName, model.ConfigName, "tiktoken.model", "figures/logo.txt"} {
			if !bytes.Equal(read(filepath.Join(out, f)), read(filepath.Join(snap, f))) {
				t.Errorf("%s: reassembled %s differs from the snapshot's", name, f)
			}
		}
		a, b := must(OpenSource(snap))(t), must(OpenSource(out))(t)
		if n := must(Compare(ctx, a, b))(t); len(b.Specs) != len(a.Specs) || n != src.info.TotalSize {
			t.Errorf("%s: compared %d bytes, the snapshot holds %d", name, n, src.info.TotalSize)
		}
		a.Close()
		b.Close()
	}

	// A link leaving the repository folder is refused.
	outside := filepath.Join(filepath.Dir(filepath.Dir(repo)), "secret.json")
	check(t, os.WriteFile(outside, []byte(`{}`), 0o600))
	check(t, os.Symlink(outside, filepath.Join(snap, "tokenizer_config.json")))
	_, err := OpenSource(snap)
	if !errors.Is(err, errLink) || !errors.Is(err, fsx.ErrOutside) || !strings.Contains(err.Error(), "tokenizer_config.json") || !strings.Contains(err.Error(), repo) {
		t.Errorf("side file linked out of the repository folder: %v, want ErrLink naming it and the folder", err)
	}
}
