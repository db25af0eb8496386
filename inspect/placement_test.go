package inspect

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// TestTensorsOutsideTheirShard writes the tiny checkpoint (cut to 8 layers,
// 11 shards) with tensors out of place: one moved to another shard unchanged
// (no warning: it is found), one moved with a wrong shape (a warning naming
// the file it is in), one removed (counted missing) and one shard under
// another file name (its tensors checked by name: one has a wrong shape). The
// streamed audit of the directory (which looks for them in a second pass) and
// the audit of the opened checkpoint must both say exactly that.
func TestTensorsOutsideTheirShard(t *testing.T) {
	t.Parallel()
	fk := fakeConfig(t, testckpt.LayersConfigJSON(t, model.ScaleTiny, 8)) // 11 shards
	cfg := fk.Config
	shards := make([][]safetensors.TensorSpec, cfg.NumShards())
	names := make([]string, cfg.NumShards())
	for i := range shards {
		shards[i] = cfg.ShardTensors(i)
		names[i] = cfg.ShardName(i)
	}
	take := func(i int, suffix string) safetensors.TensorSpec {
		j := slices.IndexFunc(shards[i], func(s safetensors.TensorSpec) bool { return strings.HasSuffix(s.Name, suffix) })
		if j < 0 {
			t.Fatalf("shard %d has no %s", i, suffix)
		}
		s := shards[i][j]
		shards[i] = slices.Delete(shards[i], j, j+1)
		return s
	}
	moved := take(1, "input_layernorm.weight")
	shards[5] = append(shards[5], moved)
	reshaped := take(2, "post_attention_layernorm.weight")
	reshaped.Shape = []int64{reshaped.Shape[0] + 2}
	shards[6] = append(shards[6], reshaped)
	removed := take(3, "mlp_res_norm.weight")
	names[4] = "renamed.safetensors"
	inRenamed := take(4, "mlp_res_norm.weight")
	inRenamed.Shape = []int64{inRenamed.Shape[0] + 4}
	shards[4] = append(shards[4], inRenamed)

	dir := t.TempDir()
	idx := &safetensors.Index{WeightMap: map[string]string{}}
	for i, specs := range shards {
		l, err := safetensors.NewFilePlan(specs, nil)
		must(t, err)
		w, err := safetensors.Create(filepath.Join(dir, names[i]), l)
		must(t, err)
		must(t, w.CommitSparse())
		for _, ti := range l.Tensors {
			idx.WeightMap[ti.Name] = names[i]
			idx.TotalSize += ti.Size()
		}
	}
	must(t, safetensors.WriteIndex(filepath.Join(dir, safetensors.IndexName), idx))
	must(t, os.WriteFile(filepath.Join(dir, model.ConfigName), fk.ConfigJSON, 0o644))

	want := []string{
		fmt.Sprintf("file %s: tensor %s: shape %v, config.json implies %v", names[6], reshaped.Name, reshaped.Shape, []int64{reshaped.Shape[0] - 2}),
		// The renamed shard's tensors are checked after the files' own.
		fmt.Sprintf("file %s: tensor %s: shape %v, config.json implies %v", names[4], inRenamed.Name, inRenamed.Shape, []int64{inRenamed.Shape[0] - 4}),
		fmt.Sprintf("1 tensors that config.json implies are not in the checkpoint (first: %s)", removed.Name),
	}
	streamed, err := Inspect(dir, Options{})
	must(t, err)
	if !slices.Equal(streamed.Warnings, want) {
		t.Errorf("streamed: warnings\n %q\nwant\n %q", streamed.Warnings, want)
	}
	// The second pass is counted: every header and the index read twice.
	if one := fk.HeaderBytes() + int64(len(fk.Index)); streamed.BytesRead < 2*one*9/10 {
		t.Errorf("streamed audit read %d bytes, want about twice %d (two passes)", streamed.BytesRead, one)
	}
	ck, err := safetensors.Open(dir)
	must(t, err)
	defer ck.Close()
	held, err := auditCheckpoint(ck, dir, Options{})
	must(t, err)
	if !slices.Equal(held.Warnings, want) {
		t.Errorf("opened: warnings\n %q\nwant\n %q", held.Warnings, want)
	}
	if _, err := Inspect(dir, Options{Strict: true}); err == nil || !strings.Contains(err.Error(), "2 tensors") || !strings.Contains(err.Error(), reshaped.Name) {
		t.Errorf("strict: %v, want ErrShape for the reshaped tensor", err)
	}
}

// auditCheckpoint accounts an opened checkpoint; source names it in the report.
func auditCheckpoint(ck *safetensors.Checkpoint, source string, opts Options) (*Report, error) {
	return audit(checkpointHeaders(ck), source, opts)
}
