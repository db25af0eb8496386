package objstore_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/objstore/s3test"
	"github.com/k3ckpt/k3ckpt/model"
)

// TestBenchS3Scaling is the second benchmark of testdata/bench.sh (skipped
// unless K3CKPT_S3_BENCH names the k3ckpt binary to measure), side by side
// in one run against one MinIO on loopback:
//
//   - inspect of the full-size header-only replica from the bucket. Its
//     1.45 TB of objects cannot be stored in a loopback MinIO, so the bucket
//     holds each shard's real header (its first 8+N bytes: all that inspect
//     reads) and every other file whole, and a proxy in front of the server
//     answers listings, HEADs and Content-Range totals with the real sizes,
//     as a store holding the whole objects would. The proxy counts the
//     requests and body bytes inspect takes. The same is timed on the tiny
//     header-only replica stored whole, straight and through the proxy, for
//     the proxy's own cost, and on the full-size replica's local sparse files.
//   - peak memory (max RSS of the child) of convert and shard s3 -> s3 of
//     the small replica, of a tall replica (the same tensors with every 8
//     shards merged into one object: 8x the object size, the same tensor
//     sizes) and of a wide replica with 4x the experts' width
//     (moe_intermediate_size 512, so 2.4x the bytes of the typical shard
//     and of its expert tensors), same flags; and of shard local -> s3 and
//     s3 -> local, to tell what the bucket DST holds from what the remote
//     source does.
//
// K3CKPT_S3_BENCH_PART=inspect or memory runs one part only;
// K3CKPT_S3_BENCH_BASE=BINARY adds a baseline binary's memory rows.
func TestBenchS3Scaling(t *testing.T) {
	bin := os.Getenv("K3CKPT_S3_BENCH")
	if bin == "" {
		t.Skip("set K3CKPT_S3_BENCH to a k3ckpt binary (testdata/bench.sh does)")
	}
	part := os.Getenv("K3CKPT_S3_BENCH_PART")
	srv := s3test.Start(t)
	work := t.TempDir()
	srv.Bucket(t, "bench")
	if part != "memory" {
		benchInspect(t, srv, bin, work)
	}
	if part != "inspect" {
		benchMemory(t, srv, bin, work)
	}
}

func benchInspect(t *testing.T, srv *s3test.Server, bin, work string) {
	full := filepath.Join(work, "full")
	if err := model.Synth(full, model.SynthOptions{Scale: model.ScaleFull, HeaderOnly: true}); err != nil {
		t.Fatal(err)
	}
	sizes, stored, logical, headers := putHeaders(t, srv, full, "bench", "full")
	tiny := filepath.Join(work, "tiny")
	if err := model.Synth(tiny, model.SynthOptions{Scale: model.ScaleTiny, HeaderOnly: true}); err != nil {
		t.Fatal(err)
	}
	srv.PutDir(t, tiny, "bench", "tiny")
	os.RemoveAll(tiny)

	p := srv.NewProxy(t)
	p.Sizes.Store(&sizes)
	inspect := func(url, endpoint string) (time.Duration, int64, int64, int64, time.Duration, string) {
		t.Setenv("AWS_ENDPOINT_URL_S3", endpoint)
		defer t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
		req, got := p.Requests.Load(), p.Received.Load()
		d, rss, cpu, out := runOut(t, bin, "inspect", url, "--json")
		return d, p.Requests.Load() - req, p.Received.Load() - got, rss, cpu, out
	}
	localD, localRSS, localCPU, localOut := runOut(t, bin, "inspect", full, "--json")
	fullD, fullReq, fullGot, fullRSS, fullCPU, fullOut := inspect("s3://bench/full", p.URL)
	tinyD, _, _, _, _, _ := inspect("s3://bench/tiny", srv.Endpoint)
	tinyPD, tinyReq, tinyGot, _, _, _ := inspect("s3://bench/tiny", p.URL)
	// The bucket's answer is the local replica's, but for where it was read.
	if a, b := summary(t, localOut), summary(t, fullOut); a != b || a == "" {
		t.Errorf("inspect of the bucket and of the local replica differ:\n%s\n%s", b, a)
	}
	fmt.Printf("full-size header-only replica: %d objects, %.2f TB as the proxy reports them, %.1f MiB stored (%.1f MiB of safetensors headers)\n",
		len(sizes), float64(logical)/1e12, float64(stored)/(1<<20), float64(headers)/(1<<20))
	fmt.Printf("k3ckpt inspect s3:// full-size, through the proxy:  %6.2f s (target <= 2 s; CPU %.2f s), %d requests, %.1f MiB received, max RSS %d MiB\n",
		fullD.Seconds(), fullCPU.Seconds(), fullReq, float64(fullGot)/(1<<20), fullRSS>>20)
	fmt.Printf("k3ckpt inspect of the same replica's local sparse files: %6.2f s (CPU %.2f s), max RSS %d MiB\n", localD.Seconds(), localCPU.Seconds(), localRSS>>20)
	fmt.Printf("k3ckpt inspect s3:// tiny header-only (stored whole): %6.2f s straight, %6.2f s through the proxy (%d requests, %.1f MiB received)\n",
		tinyD.Seconds(), tinyPD.Seconds(), tinyReq, float64(tinyGot)/(1<<20))
	os.RemoveAll(full)
}

// putHeaders uploads dir under prefix, each safetensors file cut to its
// header, and returns the real sizes (keyed bucket/key) with the bytes
// stored, their real total and the header bytes.
func putHeaders(t *testing.T, srv *s3test.Server, dir, bucket, prefix string) (map[string]int64, int64, int64, int64) {
	t.Helper()
	sizes := map[string]int64{}
	var stored, logical, headers int64
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		n := fi.Size()
		if strings.HasSuffix(e.Name(), ".safetensors") {
			var h [8]byte
			if _, err := io.ReadFull(f, h[:]); err != nil {
				t.Fatal(err)
			}
			n = 8 + int64(binary.LittleEndian.Uint64(h[:]))
			headers += n
		}
		b := make([]byte, n)
		if _, err := f.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := srv.Put(bucket, prefix+"/"+e.Name(), bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		sizes[bucket+"/"+prefix+"/"+e.Name()] = fi.Size()
		stored += n
		logical += fi.Size()
	}
	return sizes, stored, logical, headers
}

// summary is inspect --json's answer without the fields that depend on
// where it read from.
func summary(t *testing.T, out string) string {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("inspect --json: %v: %.200s", err, out)
	}
	// bytes_read: a bucket's count includes the index, a directory's not.
	for _, k := range []string{"path", "source", "root", "dir", "bytes_read"} {
		delete(v, k)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func benchMemory(t *testing.T, srv *s3test.Server, bin, work string) {
	small := filepath.Join(work, "small")
	if err := model.Synth(small, model.SynthOptions{Scale: model.ScaleSmall, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(small, model.ConfigName))
	if err != nil {
		t.Fatal(err)
	}
	wide := bytes.Replace(b, []byte(`"moe_intermediate_size": 128,`), []byte(`"moe_intermediate_size": 512,`), 1)
	if bytes.Equal(wide, b) {
		t.Fatal("the small replica's config has no moe_intermediate_size 128")
	}
	type replica struct {
		name          string
		bytes, median int64
		objects       int
	}
	var reps []replica
	for _, name := range []string{"small", "tall", "wide"} {
		dir := filepath.Join(work, name)
		switch name {
		case "tall":
			tallReplica(t, small, dir, 8)
		case "wide":
			if err := model.Synth(dir, model.SynthOptions{Config: wide, Seed: 1}); err != nil {
				t.Fatal(err)
			}
		}
		srv.PutDir(t, dir, "bench", name)
		r := replica{name: name}
		ents, _ := os.ReadDir(dir)
		var sizes []int64
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".safetensors") {
				r.bytes += fi.Size()
				sizes = append(sizes, fi.Size())
				r.objects++
			}
		}
		slices.Sort(sizes)
		r.median = sizes[len(sizes)/2]
		reps = append(reps, r)
	}
	state := func() string { return filepath.Join(t.TempDir(), "state") }
	// K3CKPT_S3_BENCH_BASE names a second binary (a baseline build), run
	// alongside on the same replicas, its rows marked "base".
	bins := []struct{ tag, path string }{{"", bin}}
	if base := os.Getenv("K3CKPT_S3_BENCH_BASE"); base != "" {
		bins = append([]struct{ tag, path string }{{"base", base}}, bins...)
	}
	fmt.Printf("peak memory (max RSS, MiB) and wall time, --jobs 4, the same flags for every replica:\n")
	fmt.Printf("%-12s %6s %7s %9s %18s %18s %18s %18s\n", "replica", "GiB", "shards", "median MB", "convert s3->s3", "shard s3->s3", "shard local->s3", "shard s3->local")
	for _, r := range reps {
		dir := filepath.Join(work, r.name)
		for _, b := range bins {
			var cells []string
			out := b.tag + r.name
			for _, args := range [][]string{
				{"convert", "s3://bench/" + r.name, "s3://bench/c-" + out, "--state-dir", state()},
				{"shard", "s3://bench/" + r.name, "s3://bench/s-" + out, "--state-dir", state()},
				{"shard", dir, "s3://bench/l-" + out, "--state-dir", state()},
				{"shard", "s3://bench/" + r.name, filepath.Join(work, "out")},
			} {
				d, rss, _, _ := runOut(t, b.path, append(args, "--jobs", "4", "-q")...)
				os.RemoveAll(filepath.Join(work, "out"))
				cells = append(cells, fmt.Sprintf("%11d (%4.1fs)", rss>>20, d.Seconds()))
			}
			name := r.name
			if b.tag != "" {
				name += " (" + b.tag + ")"
			}
			fmt.Printf("%-12s %6.2f %7d %9.1f %s\n", name, float64(r.bytes)/(1<<30), r.objects, float64(r.median)/1e6, strings.Join(cells, " "))
		}
		os.RemoveAll(dir)
	}
}

// runOut is run that also returns the child's CPU time (user and system)
// and its stdout.
func runOut(t *testing.T, bin string, args ...string) (time.Duration, int64, time.Duration, string) {
	t.Helper()
	var out bytes.Buffer
	d, rss, cpu := runWith(t, &out, bin, args...)
	return d, rss, cpu, out.String()
}
