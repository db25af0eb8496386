package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"

	"github.com/k3ckpt/k3ckpt/internal/objstore/s3test"
	"github.com/k3ckpt/k3ckpt/model"
)

// TestBenchS3 is the benchmark of testdata/bench.sh (skipped unless
// K3CKPT_S3_BENCH names the k3ckpt binary to measure): side by side in one
// run against one MinIO on loopback, it times convert of the small replica
// from the bucket against a plain download of the same objects with the
// SDK's transfer manager, inspect of a header-only replica in the bucket,
// and the peak memory (max RSS) of convert from a tiny and a small replica.
func TestBenchS3(t *testing.T) {
	bin := os.Getenv("K3CKPT_S3_BENCH")
	if bin == "" {
		t.Skip("set K3CKPT_S3_BENCH to a k3ckpt binary (testdata/bench.sh does)")
	}
	srv := s3test.Start(t)
	work := t.TempDir()
	srv.Bucket(t, "bench")
	for _, r := range []struct {
		name string
		o    model.SynthOptions
	}{
		{"small", model.SynthOptions{Scale: model.ScaleSmall, Seed: 1}},
		{"tiny", model.SynthOptions{Scale: model.ScaleTiny, Seed: 1}},
		{"headers", model.SynthOptions{Scale: model.ScaleTiny, HeaderOnly: true}},
	} {
		dir := filepath.Join(work, r.name)
		if err := model.Synth(dir, r.o); err != nil {
			t.Fatal(err)
		}
		srv.PutDir(t, dir, "bench", r.name)
		os.RemoveAll(dir)
	}
	size := dirBytes(t, srv, "small")

	// Baseline: the SDK's transfer manager downloads every object.
	tm := transfermanager.New(srv.Client, func(o *transfermanager.Options) { o.Concurrency = 16 })
	start := time.Now()
	if _, err := tm.DownloadDirectory(context.Background(), &transfermanager.DownloadDirectoryInput{
		Bucket: aws.String("bench"), KeyPrefix: aws.String("small/"), Destination: aws.String(filepath.Join(work, "tm"))}); err != nil {
		t.Fatal(err)
	}
	base := time.Since(start)
	// The same conversion from the downloaded directory: what convert's
	// own work (quantizing, hashing, writing) costs without the store.
	local, _ := run(t, bin, "convert", filepath.Join(work, "tm"), filepath.Join(work, "c-local"), "-q")
	os.RemoveAll(filepath.Join(work, "tm"))
	os.RemoveAll(filepath.Join(work, "c-local"))

	conv, rssSmall := run(t, bin, "convert", "s3://bench/small", filepath.Join(work, "c-small"), "-q")
	os.RemoveAll(filepath.Join(work, "c-small"))
	_, rssTiny := run(t, bin, "convert", "s3://bench/tiny", filepath.Join(work, "c-tiny"), "-q")
	insp, rssInsp := run(t, bin, "inspect", "s3://bench/headers", "-q")

	mb := float64(size) / (1 << 20)
	fmt.Printf("source: small replica, %.1f MiB in the bucket (MinIO on loopback)\n", mb)
	fmt.Printf("transfer manager download:   %6.2f s  %7.1f MiB/s  (baseline)\n", base.Seconds(), mb/base.Seconds())
	fmt.Printf("k3ckpt convert s3 -> local:  %6.2f s  %7.1f MiB/s  = %.2fx the baseline (target >= 0.8x), max RSS %d MiB\n",
		conv.Seconds(), mb/conv.Seconds(), base.Seconds()/conv.Seconds(), rssSmall>>20)
	fmt.Printf("k3ckpt convert local -> local: %6.2f s  (the conversion's own cost; s3 adds %.2f s)\n", local.Seconds(), conv.Seconds()-local.Seconds())
	fmt.Printf("k3ckpt convert of tiny:      max RSS %d MiB (small: %d MiB; memory independent of object size when close)\n", rssTiny>>20, rssSmall>>20)
	fmt.Printf("k3ckpt inspect header-only replica (96 shards) from the bucket: %.2f s (target <= 2 s), max RSS %d MiB\n", insp.Seconds(), rssInsp>>20)
}

func run(t *testing.T, bin string, args ...string) (time.Duration, int64) {
	t.Helper()
	cmd := exec.Command(bin, args...)
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
	return d, rss
}

func dirBytes(t *testing.T, srv *s3test.Server, prefix string) int64 {
	t.Helper()
	b := bucket(t, "s3://bench/"+prefix)
	files, err := b.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n
}
