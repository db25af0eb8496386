package convert

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

func openRemote(t *testing.T, h *testckpt.HubServer, ref string) *safetensors.Checkpoint {
	t.Helper()
	c, err := safetensors.OpenWith(context.Background(), ref, safetensors.OpenOptions{
		Env:    h.Env,
		Remote: remote.Options{RetryBase: time.Microsecond, RetryMax: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func convertRemote(t *testing.T, h *testckpt.HubServer, dst string, eo ExecOptions) (*Result, *Plan, error) {
	t.Helper()
	c := openRemote(t, h, "hf://org/name")
	r, _ := Lookup(AttnMoEDenseFP8)
	p, err := NewPlan(c, nil, r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Execute(context.Background(), p, dst, eo)
	return res, p, err
}

// TestConvertFromHub converts the tiny replica straight from a loopback hub:
// the output is byte for byte the local conversion (side files from the
// listing included), every source byte read came from the planned fetch,
// and the server sent no shard more than its needed bytes allow.
func TestConvertFromHub(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end from a loopback hub; TestConvertFromHTTPS covers the remote path under -short")
	}
	t.Parallel()
	h := testckpt.NewHubServer(t, tinySrc(t))
	dst := filepath.Join(t.TempDir(), "out")
	res, p, err := convertRemote(t, h, dst, ExecOptions{Jobs: 2, Connections: 4})
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, dst, tinyRef(t))
	n := res.Network
	if n == nil || n.Unplanned != 0 {
		t.Fatalf("network stats %+v: want every read planned", n)
	}
	var needed int64
	for _, fp := range p.Files {
		fn := remote.Needed(fileRanges(fp))
		needed += fn
		// Per shard: its header (read at open) and its planned ranges,
		// with the fetcher's bound of twice the needed bytes.
		if got := h.Sent(fp.Name); got > fp.Source.DataStart+2*fn {
			t.Errorf("%s: server sent %d bytes, header %d + planned %d", fp.Name, got, fp.Source.DataStart, fn)
		}
	}
	if n.Needed != needed || n.Fetched < needed || n.Fetched > 2*needed {
		t.Fatalf("needed %d fetched %d, plan reads %d", n.Needed, n.Fetched, needed)
	}
	// verify reads the source from the hub too.
	rep, err := Verify(context.Background(), openRemote(t, h, "hf://org/name"), dst, VerifyOptions{Jobs: 2})
	if err != nil || !rep.OK {
		t.Fatalf("verify from the hub: %v %v", err, rep.Violations)
	}
}

// TestConvertFromHTTPS: an https:// directory cannot be listed, so only its
// shards and config are converted (the plan says side files were not
// listed); those files are the local conversion's.
func TestConvertFromHTTPS(t *testing.T) {
	t.Parallel()
	h := testckpt.NewHubServer(t, miniSrc)
	c := openRemote(t, h, h.URL+"/org/name/resolve/main/")
	r, _ := Lookup(AttnMoEDenseFP8)
	p, err := NewPlan(c, nil, r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.AuxUnlisted || len(p.Aux) != 0 {
		t.Fatalf("unlisted %v, aux %v", p.AuxUnlisted, p.Aux)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 1}); err != nil {
		t.Fatal(err)
	}
	want := treeHashes(t, miniRef)
	for name, sum := range treeHashes(t, dst) {
		if want[name] != sum && name != ManifestName {
			t.Errorf("%s differs from the local conversion", name)
		}
	}
}

// TestConvertFromHubResumes interrupts a remote conversion (one shard's
// server fails) and runs it again: the shards finished the first time are
// kept without fetching their data again, and the result is the local
// conversion. A source file whose ETag changed in between is refused.
func TestConvertFromHubResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end from a loopback hub; TestConvertFromHTTPS covers the remote path under -short")
	}
	t.Parallel()
	h := testckpt.NewHubServer(t, tinySrc(t))
	dst := filepath.Join(t.TempDir(), "out")
	c := openRemote(t, h, "hf://org/name")
	last := c.Files[len(c.Files)-1].Path
	h.Fail(last, http.StatusNotImplemented) // not transient: the run stops
	// Opened before the failure was set: the plan is complete.
	r, _ := Lookup(AttnMoEDenseFP8)
	p, err := NewPlan(c, nil, r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 1}); err == nil || !strings.Contains(err.Error(), "501") {
		t.Fatalf("interrupted run: %v", err)
	}
	done := map[string]bool{}
	for _, fp := range p.Files {
		if _, err := os.Stat(filepath.Join(dst, fp.Name)); err == nil {
			done[fp.Name] = true
		}
	}
	if len(done) == 0 || done[last] {
		t.Fatalf("finished before the failure: %v", done)
	}
	h.Fail(last, 0)
	h.Reset()
	res, p2, err := convertRemote(t, h, dst, ExecOptions{Jobs: 2, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, dst, tinyRef(t))
	for _, fp := range p2.Files {
		if done[fp.Name] && h.Sent(fp.Name) > fp.Source.DataStart {
			t.Errorf("%s: finished in the first run, yet %d bytes fetched again (header %d)", fp.Name, h.Sent(fp.Name), fp.Source.DataStart)
		}
	}
	if len(res.Skipped) < len(done) {
		t.Errorf("skipped %v, finished before %v", res.Skipped, done)
	}

	// The same plan (same sizes and headers) from a source whose file has a
	// new ETag: not resumed into the old run's outputs.
	dst2 := filepath.Join(t.TempDir(), "out2")
	c3 := openRemote(t, h, "hf://org/name")
	p3, err := NewPlan(c3, nil, r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.Fail(last, http.StatusNotImplemented)
	if _, err := Execute(context.Background(), p3, dst2, ExecOptions{Jobs: 1}); err == nil {
		t.Fatal("interrupted run succeeded")
	}
	h.Fail(last, 0)
	h.SetETag(c3.Files[0].Path, `"v2"`)
	_, _, err = convertRemote(t, h, dst2, ExecOptions{Jobs: 1, Resume: true})
	if !errors.Is(err, errChanged) || !strings.Contains(err.Error(), c3.Files[0].Path) {
		t.Fatalf("changed source resumed: %v", err)
	}
	if _, _, err := convertRemote(t, h, dst2, ExecOptions{Jobs: 1, Restart: true}); err != nil {
		t.Fatalf("restart: %v", err)
	}
	sameTree(t, dst2, tinyRef(t))
}

// TestConvertFromHubNVFP4: NVIDIA's numerics with the MXFP4 → NVFP4 cast,
// from the loopback hub, give the local conversion's bytes, and the casts
// read through the shards' planned, coalesced fetches.
func TestConvertFromHubNVFP4(t *testing.T) {
	skipShort(t)
	t.Parallel()
	want := filepath.Join(t.TempDir(), "local")
	if _, err := convertDir(miniSrc, want, nvidiaOpts, ExecOptions{Jobs: 2}); err != nil {
		t.Fatal(err)
	}
	h := testckpt.NewHubServer(t, miniSrc)
	c := openRemote(t, h, "hf://org/name")
	r, _ := Lookup(AttnMoEDenseFP8)
	p, err := NewPlan(c, nil, r, nvidiaOpts)
	if err != nil {
		t.Fatal(err)
	}
	h.Reset() // count what the conversion fetches, not the open
	dst := filepath.Join(t.TempDir(), "out")
	res, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, dst, want)
	n := res.Network
	if n == nil || n.Unplanned != 0 {
		t.Fatalf("network %+v", n)
	}
	// The casts' reads are planned, so they come with the shard's one
	// coalesced fetch: the server sends a shard no byte beyond the
	// fetcher's bound of twice the planned bytes, and the plan covers
	// every MXFP4 code the casts read.
	var needed, packed int64
	for _, fp := range p.Files {
		fn := remote.Needed(fileRanges(fp))
		needed += fn
		if got := h.Sent(fp.Name); got > 2*fn {
			t.Errorf("%s: server sent %d bytes for %d planned", fp.Name, got, fn)
		}
		for _, st := range fp.Steps {
			if st.Kind == stepNVFP4 && st.Part == partCodes {
				packed += st.Cast.Packed.Size()
			}
		}
	}
	if packed == 0 || n.Needed != needed || needed < packed {
		t.Fatalf("needed %d (network %d), MXFP4 codes cast %d", needed, n.Needed, packed)
	}
}

// TestConvertFromHubSpillsCodes: a remote file whose FP8 codes are not held
// in memory spills them beside the output between its scale and code steps,
// so each weight is fetched once (a local one would be read twice); the
// output is the local conversion's, and no spill is left behind.
func TestConvertFromHubSpillsCodes(t *testing.T) {
	defer func(b int64) { heldCodesBudget = b }(heldCodesBudget)
	heldCodesBudget = 0 // no file's codes are held
	h := testckpt.NewHubServer(t, miniSrc)
	dst := filepath.Join(t.TempDir(), "out")
	var c countProgress
	res, p, err := convertRemote(t, h, dst, ExecOptions{Jobs: 2, Connections: 4, Progress: &c})
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, dst, miniRef)
	if c.total.Load() == 0 || c.done.Load() != c.total.Load() {
		t.Errorf("reported %d of %d bytes of work", c.done.Load(), c.total.Load())
	}
	if temps := tempsUnder(t, dst); len(temps) != 0 {
		t.Errorf("left %v", temps)
	}
	var spilled, saved, needed int64
	for _, fp := range p.Files {
		once := remote.Needed(fileRanges(fp))
		needed += once
		twice := *fp
		twice.Steps = slices.Clone(fp.Steps)
		var again int64
		for i, st := range twice.Steps {
			if st.Kind == stepCodes && st.HoldCodes {
				t.Fatalf("%s: codes held under a zero budget", fp.Name)
			}
			if st.Kind == stepCodes && st.SpillCodes {
				spilled++
				again += st.Len
			}
			twice.Steps[i].SpillCodes = false
		}
		saved += again
		if got := remote.Needed(fileRanges(&twice)) - once; got != again {
			t.Errorf("%s: reading its weights again would fetch %d more bytes, want their %d", fp.Name, got, again)
		}
	}
	if spilled == 0 {
		t.Fatal("no weight spilled")
	}
	n := res.Network
	if n == nil || n.Unplanned != 0 || n.Needed != needed {
		t.Fatalf("network %+v, the plan's ranges %d", n, needed)
	}
	// Each quantized weight is needed once: the plan's fetch is what the
	// held-codes plan of the same files fetches.
	heldCodesBudget = maxHeldCodes
	_, held, err := convertRemote(t, h, filepath.Join(t.TempDir(), "held"), ExecOptions{Jobs: 2, Connections: 4, NoSpaceCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	if held.FetchBytes != p.FetchBytes {
		t.Errorf("spilling plan fetches %d bytes, the held-codes plan %d (%d spilled weights, %d bytes not fetched twice)", p.FetchBytes, held.FetchBytes, spilled, saved)
	}
}
