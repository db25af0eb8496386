package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"golang.org/x/sync/errgroup"

	"github.com/k3ckpt/k3ckpt/internal/objstore/s3test"
	"github.com/k3ckpt/k3ckpt/model"
)

// TestBenchS3 is the benchmark of testdata/bench.sh (skipped unless
// K3CKPT_S3_BENCH names the k3ckpt binary to measure): side by side in one
// run against one MinIO on loopback, it times convert of the small replica
// from one prefix of the bucket to another against a plain copy of the same
// objects through the same server with the SDK's transfer manager (its
// GetObject streamed into its UploadObject, objects in parallel), and
// convert s3 → local and local → local for what the store adds; then
// inspect of a header-only replica in the bucket, and the peak memory (max
// RSS) of convert s3 → s3 from a tiny and from a small replica.
// K3CKPT_S3_BENCH_SCALE=tiny measures the tiny replica instead of the small.
func TestBenchS3(t *testing.T) {
	bin := os.Getenv("K3CKPT_S3_BENCH")
	if bin == "" {
		t.Skip("set K3CKPT_S3_BENCH to a k3ckpt binary (testdata/bench.sh does)")
	}
	scale := model.ScaleSmall
	if os.Getenv("K3CKPT_S3_BENCH_SCALE") == "tiny" {
		scale = model.ScaleTiny
	}
	srv := s3test.Start(t)
	work := t.TempDir()
	srv.Bucket(t, "bench")
	for _, r := range []struct {
		name string
		o    model.SynthOptions
	}{
		{"small", model.SynthOptions{Scale: scale, Seed: 1}},
		{"tiny", model.SynthOptions{Scale: model.ScaleTiny, Seed: 2}},
		{"headers", model.SynthOptions{Scale: model.ScaleTiny, HeaderOnly: true}},
	} {
		dir := filepath.Join(work, r.name)
		if err := model.Synth(dir, r.o); err != nil {
			t.Fatal(err)
		}
		srv.PutDir(t, dir, "bench", r.name)
		if r.name != "small" {
			os.RemoveAll(dir)
		}
	}
	size, names := dirBytes(t, srv, "small")

	// Baseline: the transfer manager copies every object.
	tm := transfermanager.New(srv.Client, func(o *transfermanager.Options) { o.Concurrency = 16 })
	start := time.Now()
	var g errgroup.Group
	g.SetLimit(4)
	for _, name := range names {
		g.Go(func() error {
			out, err := tm.GetObject(context.Background(), &transfermanager.GetObjectInput{Bucket: aws.String("bench"), Key: aws.String("small/" + name)})
			if err != nil {
				return err
			}
			_, err = tm.UploadObject(context.Background(), &transfermanager.UploadObjectInput{Bucket: aws.String("bench"), Key: aws.String("tmcopy/" + name), Body: out.Body})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	base := time.Since(start)
	state := func() string { return filepath.Join(t.TempDir(), "state") }

	conv, rssSmall := run(t, bin, "convert", "s3://bench/small", "s3://bench/c-small", "--state-dir", state(), "-q")
	toLocal, _ := run(t, bin, "convert", "s3://bench/small", filepath.Join(work, "c-s3"), "-q")
	os.RemoveAll(filepath.Join(work, "c-s3"))
	local, _ := run(t, bin, "convert", filepath.Join(work, "small"), filepath.Join(work, "c-local"), "-q")
	os.RemoveAll(filepath.Join(work, "c-local"))
	os.RemoveAll(filepath.Join(work, "small"))
	_, rssTiny := run(t, bin, "convert", "s3://bench/tiny", "s3://bench/c-tiny", "--state-dir", state(), "-q")
	insp, rssInsp := run(t, bin, "inspect", "s3://bench/headers", "-q")

	mb := float64(size) / (1 << 20)
	fmt.Printf("source: %s replica, %.1f MiB in %d objects (MinIO on loopback)\n", scale, mb, len(names))
	fmt.Printf("transfer manager copy s3 -> s3: %6.2f s  %7.1f MiB/s  (baseline)\n", base.Seconds(), mb/base.Seconds())
	fmt.Printf("k3ckpt convert s3 -> s3:        %6.2f s  %7.1f MiB/s  = %.2fx the baseline (target >= 0.8x), max RSS %d MiB\n",
		conv.Seconds(), mb/conv.Seconds(), base.Seconds()/conv.Seconds(), rssSmall>>20)
	fmt.Printf("k3ckpt convert s3 -> local:     %6.2f s  = %.2fx the baseline\n", toLocal.Seconds(), base.Seconds()/toLocal.Seconds())
	fmt.Printf("k3ckpt convert local -> local:  %6.2f s  (the conversion's own cost)\n", local.Seconds())
	fmt.Printf("k3ckpt convert s3 -> s3, tiny replica: max RSS %d MiB (%s: %d MiB; memory independent of object size when close)\n", rssTiny>>20, scale, rssSmall>>20)
	fmt.Printf("k3ckpt inspect header-only tiny replica (96 shards) from the bucket: %.2f s (target <= 2 s for the full-size one), max RSS %d MiB\n", insp.Seconds(), rssInsp>>20)
}

func run(t *testing.T, bin string, args ...string) (time.Duration, int64) {
	t.Helper()
	d, rss, _ := runWith(t, nil, bin, args...)
	return d, rss
}

// runWith runs bin with stdout going to stdout (nil: discarded) and
// returns its wall time, max RSS and CPU time.
func runWith(t *testing.T, stdout io.Writer, bin string, args ...string) (time.Duration, int64, time.Duration) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = stdout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr // the engine warnings of convert
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	d := time.Since(start)
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	var rss int64
	if ru != nil {
		rss = ru.Maxrss << 10 // KiB on Linux
	}
	return d, rss, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

func dirBytes(t *testing.T, srv *s3test.Server, prefix string) (int64, []string) {
	t.Helper()
	b := bucket(t, "s3://bench/"+prefix)
	files, err := b.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	var names []string
	for _, f := range files {
		n += f.Size
		names = append(names, f.Name)
	}
	return n, names
}
