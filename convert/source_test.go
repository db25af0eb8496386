package convert

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// A source shard rewritten between planning and execution (same size,
// another header) is refused before anything is written under its name.
func TestSourceHeaderChangedSincePlanning(t *testing.T) {
	shard := miniShard(2)
	src := copyWithShard(t, shard)
	p, c, err := planFor(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// One byte of the header's JSON (inside a tensor name), in place.
	f := filepath.Join(src, shard)
	fh, err := os.OpenFile(f, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteAt([]byte("X"), 20)
	fh.Close()
	dst := filepath.Join(t.TempDir(), "out")
	_, err = Execute(context.Background(), p, dst, ExecOptions{Jobs: 1})
	if !errors.Is(err, errChanged) || !strings.Contains(err.Error(), f) {
		t.Fatalf("source changed since planning: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, shard)); !os.IsNotExist(err) {
		t.Errorf("%s written from a changed source", shard)
	}
	if _, err := os.Stat(filepath.Join(dst, ManifestName)); !os.IsNotExist(err) {
		t.Error("manifest written")
	}
}

// A plan records, per file, the sha256 of the source's header prefix
// [0, DataStart): the bytes on disk, hashed here on their own.
func TestPlanRecordsSourceHeaderSum(t *testing.T) {
	t.Parallel()
	p, c, err := planFor(miniSrc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, fp := range p.Files {
		b, err := os.ReadFile(filepath.Join(miniSrc, fp.Name))
		if err != nil {
			t.Fatal(err)
		}
		if want := sha256.Sum256(b[:fp.Source.DataStart]); fp.SourceHeader != want {
			t.Errorf("%s: planned header sum %x, the file's is %x", fp.Name, fp.SourceHeader, want)
		}
	}
}

// mutator modifies a source file once the executor has reported a given
// amount of work, i.e. while the conversion runs.
type mutator struct {
	after int64
	fn    func()
	mu    sync.Mutex
	done  int64
	fired bool
}

func (m *mutator) Start(int64) {}
func (m *mutator) Add(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.done += n
	if !m.fired && m.done >= m.after {
		m.fired = true
		m.fn()
	}
}

// A source shard written to while it is being converted (its copied bytes,
// which are hashed on one read and moved by the kernel on another) fails the
// conversion naming the file: never exit 0 with a manifest that does not
// describe the written files.
func TestSourceModifiedDuringConversion(t *testing.T) {
	shard := miniShard(1)
	src := copyWithShard(t, shard)
	p, c, err := planFor(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Work of the units before the shard (Jobs 1 does them in name order),
	// plus a little of the shard's own.
	var before int64
	for _, u := range p.units() {
		if u.Name == shard {
			break
		}
		before += u.Work
	}
	path := filepath.Join(src, shard)
	fp := p.Files[1]
	last := fp.Source.Tensors[len(fp.Source.Tensors)-1]
	m := &mutator{after: before + fp.Layout.DataStart + 1, fn: func() {
		fh, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer fh.Close()
		time.Sleep(2 * time.Millisecond) // a distinct mtime on coarse clocks
		fh.WriteAt([]byte{0x5A}, fp.Source.DataStart+last.Begin)
	}}
	dst := filepath.Join(t.TempDir(), "out")
	_, err = Execute(context.Background(), p, dst, ExecOptions{Jobs: 1, Progress: m})
	if !m.fired {
		t.Fatal("the source was never modified")
	}
	if !errors.Is(err, errChanged) || !strings.Contains(err.Error(), path) {
		t.Fatalf("source modified while converting: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, ManifestName)); !os.IsNotExist(err) {
		t.Error("manifest written although a source changed")
	}
	if _, err := os.Stat(filepath.Join(dst, shard)); !os.IsNotExist(err) {
		t.Errorf("%s committed from a source that changed under it", shard)
	}
}

// A config.json that no longer declares the MXFP4 experts next to it (its
// quantization_config removed, so it declares BF16 experts) is refused by the
// planner, naming an expert tensor, instead of giving an output whose config
// describes its experts wrongly.
func TestConfigExpertFormatMismatch(t *testing.T) {
	src := copyWithShard(t, "")
	cfg := readJSONFile(t, filepath.Join(src, model.ConfigName))
	text, _ := cfg["text_config"].(map[string]any)
	_, top := cfg["quantization_config"]
	_, inText := text["quantization_config"]
	if !top && !inText {
		t.Fatal("the replica's config has no quantization_config")
	}
	delete(cfg, "quantization_config")
	delete(text, "quantization_config")
	b, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(src, model.ConfigName), b, 0o644)
	_, _, err := planFor(src, Options{})
	if !errors.Is(err, errConfigMismatch) || !strings.Contains(err.Error(), ".experts.") || !strings.Contains(err.Error(), "declares unquantized experts") {
		t.Fatalf("config without the MXFP4 experts: %v", err)
	}
}

// A single shard given as SRC is one file of a larger checkpoint: refused,
// never converted with its siblings copied as side files.
func TestSingleShardSource(t *testing.T) {
	shards, err := filepath.Glob(filepath.Join(miniSrc, "model-*-of-*.safetensors"))
	if err != nil || len(shards) < 3 {
		t.Fatalf("mini replica shards %v: %v", shards, err)
	}
	slices.Sort(shards)
	if _, _, err := planFor(shards[len(shards)/2], Options{}); !errors.Is(err, errPartialSource) || !strings.Contains(err.Error(), "convert the directory") {
		t.Fatalf("one shard as SRC: %v", err)
	}
	// A checkpoint that is one file is a checkpoint of one file.
	dir := filepath.Join(t.TempDir(), "one")
	os.MkdirAll(dir, 0o755)
	first := filepath.Base(shards[0])
	for _, name := range []string{model.ConfigName, first, "tiktoken.model"} {
		b, err := os.ReadFile(filepath.Join(miniSrc, name)) // a link would change miniSrc's ctime
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	p, c, err := planFor(filepath.Join(dir, first), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(p.Files) != 1 || len(p.Aux) != 1 || p.Aux[0].Name != "tiktoken.model" {
		t.Errorf("one-file checkpoint: %d shards, side files %+v", len(p.Files), p.Aux)
	}
}

// checkExpertFormat refuses exactly a routed expert stored otherwise than the
// config declares: non-U8 under MXFP4, U8 under BF16; any other tensor, and
// any expert under another format, passes.
func TestCheckExpertFormat(t *testing.T) {
	t.Parallel()
	const expert = "language_model.model.layers.3.block_sparse_moe.experts.7.w1.weight_packed"
	const other = "language_model.model.layers.3.self_attn.q_proj.weight"
	for _, c := range []struct {
		experts model.ExpertFormat
		name    string
		dtype   safetensors.DType
		want    string // a piece of the error, "" for none
	}{
		{model.ExpertsMXFP4, expert, safetensors.U8, ""},
		{model.ExpertsMXFP4, expert, safetensors.BF16, "declares MXFP4 experts"},
		{model.ExpertsMXFP4, other, safetensors.BF16, ""},
		{model.ExpertsMXFP4, other, safetensors.U8, ""},
		{model.ExpertsBF16, expert, safetensors.BF16, ""},
		{model.ExpertsBF16, expert, safetensors.U8, "declares unquantized experts"},
		{model.ExpertsBF16, other, safetensors.U8, ""},
		{model.ExpertsNVFP4, expert, safetensors.U8, ""},
		{model.ExpertsNVFP4, expert, safetensors.BF16, ""},
	} {
		err := checkExpertFormat(k3Classifier, safetensors.TensorInfo{Name: c.name, DType: c.dtype}, c.experts)
		if c.want == "" && err != nil || c.want != "" && (!errors.Is(err, errConfigMismatch) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.name)) {
			t.Errorf("%v experts, %s %s: %v (want %q)", c.experts, c.dtype, c.name, err, c.want)
		}
	}
}
