package layout

import (
	"context"
	"errors"
	"net/http"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
	st "github.com/k3ckpt/k3ckpt/safetensors"
)

func openHub(t *testing.T, h *testckpt.HubServer, ref string) *Source {
	t.Helper()
	c, err := st.OpenWith(context.Background(), ref, st.OpenOptions{
		Env: func(k string) string { return map[string]string{"HF_ENDPOINT": h.URL, "HOME": t.TempDir()}[k] },
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenCheckpoint(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sameTrees compares two export trees byte for byte, leaving out the hidden
// record of each run's output stamps (it differs between any two runs).
func sameTrees(t *testing.T, got, want string) {
	t.Helper()
	testckpt.SameTree(t, got, want, "the local export", func(rel string) bool { return strings.HasPrefix(path.Base(rel), ".") })
}

// TestExportFromHub exports one rank of dp16 (packed scales: slices,
// replicas and packing all read the source) and one pp16 stage straight
// from a loopback hub: each output tree is byte for byte the export of the
// local directory, every read came from the planned fetch, and the server
// sent the rank's planned bytes (at most ×2, the fetcher's bound; here
// ×1.00) and nothing else but the headers.
func TestExportFromHub(t *testing.T) {
	t.Parallel()
	e2e(t)
	_, fp8 := fixtures(t)
	for _, c := range []struct {
		layout string
		o      Options
		eo     ExportOptions
	}{
		{"dp16", Options{}, ExportOptions{Ranks: []int{0}, Pack: packUE8M0}},
		{"pp16", Options{}, ExportOptions{Ranks: []int{3}}},
	} {
		t.Run(c.layout, func(t *testing.T) {
			want, _ := export(t, fp8, c.layout, c.o, c.eo)
			h := testckpt.NewHubServer(t, fp8)
			s := openHub(t, h, "hf://org/name")
			var headers, all int64
			for _, f := range s.files {
				headers += f.DataStart
				all += f.Size
			}
			h.Reset() // count from here: opening read the headers
			m := must(s.Model())(t)
			l := must(builtinLayout(c.layout, m, c.o))(t)
			p := must(PlanExport(s, l, c.eo))(t)
			dst := filepath.Join(t.TempDir(), "out")
			res, err := p.Execute(context.Background(), dst, ExecOptions{Connections: 4})
			if err != nil {
				t.Fatal(err)
			}
			sameTrees(t, dst, want)
			n := res.Network
			if n == nil || n.Unplanned != 0 || n.Needed <= 0 || n.Fetched < n.Needed || n.Fetched > 2*n.Needed {
				t.Fatalf("network %+v", n)
			}
			// The rank's bytes: what it writes (a whole shard copied verbatim
			// brings its header along).
			if n.Needed > res.Bytes+headers {
				t.Fatalf("needed %d for %d bytes written", n.Needed, res.Bytes)
			}
			// Validation checks read outside the stream (small scale and
			// padding reads); everything else is the planned fetch.
			if got := h.Sent(""); got > n.Fetched+headers || got >= all {
				t.Fatalf("server sent %d bytes: fetched %d, headers %d, checkpoint %d", got, n.Fetched, headers, all)
			}
			t.Logf("%s %v: needed %d, fetched %d, written %d, server sent %d of %d", c.layout, c.eo.Ranks, n.Needed, n.Fetched, res.Bytes, h.Sent(""), all)
		})
	}
}

// TestExportFromHTTPS: an https:// directory gives config.json as the only
// side file; the shards written are the local export's.
func TestExportFromHTTPS(t *testing.T) {
	t.Parallel()
	e2e(t)
	_, fp8 := fixtures(t)
	want, _ := export(t, fp8, "dp16", Options{}, ExportOptions{Ranks: []int{1}})
	h := testckpt.NewHubServer(t, fp8)
	c, err := st.OpenWith(context.Background(), h.URL+"/org/name/resolve/main/", st.OpenOptions{Remote: remote.Options{}})
	if err != nil {
		t.Fatal(err)
	}
	s := must(OpenCheckpoint(c))(t)
	defer s.Close()
	if !s.AuxUnlisted {
		t.Fatal("https:// source claims a listing")
	}
	m := must(s.Model())(t)
	p := must(PlanExport(s, must(builtinLayout("dp16", m, Options{}))(t), ExportOptions{Ranks: []int{1}}))(t)
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := p.Execute(context.Background(), dst, ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	sameTrees(t, dst, want)
}

// TestExportFromHubResumes interrupts a pp16 export from a loopback hub (the
// shard of the last layer fails) and runs it again: the stages finished the
// first time are kept without fetching their bytes again, and the result is
// the local export. A rerun after a source file changed (new ETag) is
// refused (until --restart).
func TestExportFromHubResumes(t *testing.T) {
	t.Parallel()
	e2e(t)
	_, fp8 := fixtures(t)
	want, _ := export(t, fp8, "pp16", Options{}, ExportOptions{})
	h := testckpt.NewHubServer(t, fp8)
	plan := func() *Plan {
		s := openHub(t, h, "hf://org/name")
		m := must(s.Model())(t)
		return must(PlanExport(s, must(builtinLayout("pp16", m, Options{}))(t), ExportOptions{}))(t)
	}
	p := plan()
	last := p.src.info.Files[len(p.src.info.Files)-4].Name // layer 92's shard (93 of 96)
	h.Fail(last, http.StatusNotImplemented)
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := p.Execute(context.Background(), dst, ExecOptions{Jobs: 1}); err == nil || !strings.Contains(err.Error(), "501") {
		t.Fatalf("interrupted run: %v", err)
	}
	h.Fail(last, 0)
	h.Reset()
	res, err := plan().Execute(context.Background(), dst, ExecOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	sameTrees(t, dst, want)
	if res.Kept == 0 || res.Network.Needed >= p.FetchBytes() {
		t.Fatalf("kept %d files, fetched for %d of the plan's %d bytes", res.Kept, res.Network.Needed, p.FetchBytes())
	}
	// The files kept were not fetched: what was fetched is what was written.
	if res.Network.Needed > res.Bytes+int64(res.Written)*(64<<10) {
		t.Fatalf("needed %d for %d bytes written in %d files", res.Network.Needed, res.Bytes, res.Written)
	}

	dst2 := filepath.Join(t.TempDir(), "out2")
	p2 := plan()
	h.Fail(last, http.StatusNotImplemented)
	if _, err := p2.Execute(context.Background(), dst2, ExecOptions{Jobs: 1}); err == nil {
		t.Fatal("interrupted run succeeded")
	}
	h.Fail(last, 0)
	h.SetETag(last, `"v2"`)
	if _, err := plan().Execute(context.Background(), dst2, ExecOptions{}); !errors.Is(err, errOutputExists) || !strings.Contains(err.Error(), "--restart") {
		t.Fatalf("changed source resumed: %v", err)
	}
}

// TestCompareRemote checks a header-only replica (the tiny one cut to 16
// layers) against its copy on a loopback hub, each side in turn the remote
// one: every byte is compared, and the remote side is read by the coalesced
// requests of one stream (at most one per 4 MiB of a shard, and one for each
// shard's start) rather than one per tensor. A shard that changes upstream
// during the check fails it, naming the shard.
func TestCompareRemote(t *testing.T) {
	t.Parallel()
	e2e(t)
	bf := testckpt.Dir(t, "tiny-16-layers", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Config: testckpt.LayersConfigJSON(t, model.ScaleTiny, 16), HeaderOnly: true, Seed: 5})
	})
	local := must(OpenSource(bf))(t)
	defer local.Close()
	h := testckpt.NewHubServer(t, bf)
	var bound int64
	for _, f := range local.files {
		bound += 1 + (f.Size-f.DataStart+(4<<20)-1)/(4<<20)
	}
	ctx := context.Background()
	for _, remoteIsA := range []bool{false, true} {
		hub := openHub(t, h, "hf://org/name")
		a, b := local, hub
		if remoteIsA {
			a, b = hub, local
		}
		before := hub.remote.Stats()
		n := must(Compare(ctx, a, b))(t)
		got := hub.remote.Stats()
		if n != local.info.TotalSize {
			t.Errorf("remote a=%v: compared %d bytes, the replica holds %d", remoteIsA, n, local.info.TotalSize)
		}
		if reqs := got.Requests - before.Requests; reqs > bound || reqs >= int64(len(local.Specs)) {
			t.Errorf("remote a=%v: %d requests for %d tensors in %d shards, want at most %d", remoteIsA, reqs, len(local.Specs), len(local.files), bound)
		}
	}
	hub := openHub(t, h, "hf://org/name")
	changed := hub.info.Files[len(hub.info.Files)/2].Name
	h.SetETag(changed, `"v2"`)
	if _, err := Compare(ctx, local, hub); !errors.Is(err, remote.ErrChanged) || !strings.Contains(err.Error(), changed) {
		t.Errorf("shard %s changed during the check: %v, want ErrChanged naming it", changed, err)
	}
}
