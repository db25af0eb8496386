package inspect

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// TestBadInput damages a copy of a header-only replica (the tiny one cut to 4
// layers, 7 shards) in each way a checkpoint can be broken: a missing or
// unindexed shard, an index disagreeing with a header, a truncated file or
// header, a malformed header, a file shorter than its length prefix. The
// audit fails with the codec's sentinel and an error naming the file.
func TestBadInput(t *testing.T) {
	t.Parallel()
	src := smallReplica(t)
	const victim = "model-00002-of-000007.safetensors"
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string) string // returns the name the error must mention
		want   error                                 // the sentinel err wraps, or
		text   string                                // the text of a sentinel the codec does not export
	}{
		{"missing shard named by the index", func(t *testing.T, dir string) string {
			must(t, os.Remove(filepath.Join(dir, victim)))
			return victim
		}, safetensors.ErrNotFound, ""},
		{"shard not in the index", func(t *testing.T, dir string) string {
			b, err := os.ReadFile(filepath.Join(dir, victim))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(dir, "extra.safetensors"), b, 0o644))
			return "extra.safetensors"
		}, safetensors.ErrIndex, ""},
		{"index and header disagree", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, safetensors.IndexName)
			var idx map[string]any
			b, err := os.ReadFile(p)
			must(t, err)
			must(t, json.Unmarshal(b, &idx))
			wm := idx["weight_map"].(map[string]any)
			// Move one tensor of shard 2 to shard 3 in the index only.
			for name, f := range wm {
				if f == victim {
					wm[name] = "model-00003-of-000007.safetensors"
					break
				}
			}
			b, err = json.Marshal(idx)
			must(t, err)
			must(t, os.WriteFile(p, b, 0o644))
			return "model-0000"
		}, safetensors.ErrIndex, ""},
		{"truncated file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, victim)
			st, err := os.Stat(p)
			must(t, err)
			must(t, os.Truncate(p, st.Size()-1))
			return victim
		}, nil, "data end does not match file size"},
		{"truncated header", func(t *testing.T, dir string) string {
			must(t, os.Truncate(filepath.Join(dir, victim), 100))
			return victim
		}, nil, "header extends past end of file"},
		{"malformed header", func(t *testing.T, dir string) string {
			f, err := os.OpenFile(filepath.Join(dir, victim), os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteAt([]byte(`{"x":`), 8)
			must(t, err)
			must(t, f.Close())
			return victim
		}, nil, "header is not a valid JSON object"},
		{"file shorter than 8 bytes", func(t *testing.T, dir string) string {
			must(t, os.Truncate(filepath.Join(dir, victim), 5))
			return victim
		}, nil, "file shorter than 8 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyReplica(t, src)
			mention := c.damage(t, dir)
			_, err := Inspect(dir, Options{})
			if err == nil || c.want != nil && !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("err = %v, want %v%s", err, c.want, c.text)
			}
			if !strings.Contains(err.Error(), mention) {
				t.Errorf("error %q does not name %s", err, mention)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// rangeLog serves a directory like a model hub (Range supported) and records
// every request, so the test can check what inspect fetched.
type rangeLog struct {
	mu      sync.Mutex // the codec fetches headers concurrently
	h       http.Handler
	fetched map[string][]string // path → Range headers
	noRange bool
}

func (l *rangeLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.fetched[r.URL.Path] = append(l.fetched[r.URL.Path], r.Method+" "+r.Header.Get("Range"))
	l.mu.Unlock()
	if l.noRange {
		r.Header.Del("Range") // a server that ignores ranges answers 200 with the whole file
	}
	l.h.ServeHTTP(w, r)
}

// TestRemote inspects the tiny replica (96 shards, every tensor kind) over
// HTTP range requests and checks that only headers, the index and
// config.json were fetched.
func TestRemote(t *testing.T) {
	t.Parallel()
	dir := tinyReplica(t)
	log := &rangeLog{h: http.FileServer(http.Dir(dir)), fetched: map[string][]string{}}
	srv := httptest.NewServer(log)
	defer srv.Close()
	rep, err := Inspect(srv.URL+"/", Options{})
	if err != nil {
		t.Fatal(err)
	}
	local, err := Inspect(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.TotalBytes != local.TotalBytes || !equalRows(rep.Components, local.Components) {
		t.Errorf("remote audit differs from local")
	}
	// Everything that must be read: headers, index, config.json.
	need := local.BytesRead
	if rep.BytesRead < need || float64(rep.BytesRead) > 1.03*float64(need) {
		t.Errorf("fetched %d bytes, headers+index+config are %d", rep.BytesRead, need)
	}
	// No request reaches into a shard's data.
	for _, f := range local.Files {
		for _, req := range log.fetched["/"+f.Path] {
			if end, ok := rangeEnd(req); ok && end >= f.HeaderBytes {
				t.Errorf("%s: request %q reads past the header (%d bytes)", f.Path, req, f.HeaderBytes)
			}
		}
	}
	t.Logf("fetched %d bytes for %d bytes of headers, index and config", rep.BytesRead, need)
}

func equalRows(a, b []row) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// rangeEnd parses the last byte of "GET bytes=a-b".
func rangeEnd(req string) (int64, bool) {
	_, spec, ok := strings.Cut(req, "bytes=")
	if !ok {
		return 0, false
	}
	_, hi, ok := strings.Cut(spec, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(hi, 10, 64)
	return n, err == nil
}

func TestRemoteBad(t *testing.T) {
	t.Parallel()
	dir := tinyReplica(t)
	t.Run("no range support", func(t *testing.T) {
		srv := httptest.NewServer(&rangeLog{h: http.FileServer(http.Dir(dir)), fetched: map[string][]string{}, noRange: true})
		defer srv.Close()
		_, err := Inspect(srv.URL+"/", Options{})
		if err == nil || !strings.Contains(err.Error(), "ignored the Range header") || !strings.Contains(err.Error(), srv.URL) {
			t.Fatalf("err = %v, want the range refusal naming the URL", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL + "/"
		srv.Close()
		_, err := Inspect(url, Options{})
		if err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(url, "/")) {
			t.Fatalf("err = %v, want an error naming %s", err, url)
		}
	})
	t.Run("missing shard", func(t *testing.T) {
		d := copyReplica(t, smallReplica(t))
		must(t, os.Remove(filepath.Join(d, "model-00005-of-000007.safetensors")))
		srv := httptest.NewServer(http.FileServer(http.Dir(d)))
		defer srv.Close()
		_, err := Inspect(srv.URL+"/", Options{})
		if err == nil || !strings.Contains(err.Error(), "model-00005-of-000007.safetensors") {
			t.Fatalf("err = %v, want an error naming the missing shard", err)
		}
	})
}

// TestShapeAgainstConfig gives a replica (the tiny one cut to 4 layers) a
// config.json whose vocabulary disagrees with embed_tokens and lm_head: a
// warning, or errShape with Strict.
func TestShapeAgainstConfig(t *testing.T) {
	t.Parallel()
	dir := copyReplica(t, smallReplica(t))
	p := filepath.Join(dir, model.ConfigName)
	b, err := os.ReadFile(p)
	must(t, err)
	var cfg map[string]any
	must(t, json.Unmarshal(b, &cfg))
	tc := cfg["text_config"].(map[string]any)
	tc["vocab_size"] = tc["vocab_size"].(float64) + 8
	b, err = json.Marshal(cfg)
	must(t, err)
	must(t, os.WriteFile(p, b, 0o644))

	rep, err := Inspect(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var hits int
	for _, w := range rep.Warnings {
		if strings.Contains(w, "embed_tokens.weight") || strings.Contains(w, "lm_head.weight") {
			hits++
		}
	}
	if hits != 2 || len(rep.Warnings) != 2 {
		t.Errorf("warnings %q, want one each for embed_tokens and lm_head", rep.Warnings)
	}
	if _, err := Inspect(dir, Options{Strict: true}); !errors.Is(err, errShape) || !strings.Contains(err.Error(), "2 tensors") {
		t.Errorf("strict: err = %v, want ErrShape for 2 tensors", err)
	}
}

// TestOtherListed writes a single file with a K3 tensor and a tensor no rule
// knows: the second is accounted under other, never dropped.
func TestOtherListed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	specs := []safetensors.TensorSpec{
		{Name: "language_model.model.layers.0.input_layernorm.weight", DType: safetensors.BF16, Shape: []int64{16}},
		{Name: "some.custom.adapter", DType: safetensors.F32, Shape: []int64{3, 5}},
	}
	l, err := safetensors.NewFilePlan(specs, nil)
	must(t, err)
	path := filepath.Join(dir, "model.safetensors")
	w, err := safetensors.Create(path, l)
	must(t, err)
	defer w.Abort()
	for _, s := range l.Tensors {
		tw, err := w.Tensor(s.Name)
		must(t, err)
		_, err = tw.Write(make([]byte, s.Size()))
		must(t, err)
	}
	must(t, w.Commit())

	rep, err := Inspect(path, Options{By: byLayer})
	if err != nil {
		t.Fatal(err)
	}
	want := []row{{Key: "norms", tally: tally{1, 32}}, {Key: "other", tally: tally{1, 60}}}
	if !equalRows(rep.Components, want) {
		t.Errorf("components %v, want %v", rep.Components, want)
	}
	wantLayers := []row{{Key: "0", tally: tally{1, 32}}, {Key: "model", tally: tally{1, 60}}}
	if !equalRows(rep.Groups, wantLayers) {
		t.Errorf("layers %v, want %v", rep.Groups, wantLayers)
	}
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "no config.json") {
		t.Errorf("warnings %v, want the missing config.json noted", rep.Warnings)
	}
}
