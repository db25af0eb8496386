package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/objstore/s3test"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

var bytesReadRE = regexp.MustCompile(`"bytes_read": [0-9]+,`)

// s3Source is the tiny replica cut to 16 layers (every tensor kind in 19
// shards; testckpt.LayersConfigJSON), with its data, that the S3 tests read
// (put in a bucket, or as the local twin of a bucket run): what they test
// is the transport, not the layer count. It is synthesized once per test
// binary; tests must not write into it.
func s3Source(t *testing.T) string {
	t.Helper()
	cfg := testckpt.LayersConfigJSON(t, model.ScaleTiny, 16)
	return testckpt.Dir(t, "s3-tiny-16", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Config: cfg, Seed: 5})
	})
}

// s3Tiny is the whole tiny replica, for the one test that needs files
// larger than two of S3's 5 MiB parts; synthesized once per test binary,
// read only.
func s3Tiny(t *testing.T) string {
	t.Helper()
	return testckpt.Dir(t, "s3-tiny", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Scale: model.ScaleTiny, Seed: 5})
	})
}

// s3Converted is s3Source converted locally with the default options, once
// per test binary: what every bucket run of convert must match.
func s3Converted(t *testing.T) string {
	t.Helper()
	return filepath.Join(testckpt.Dir(t, "s3-tiny-16-converted", func(dir string) error {
		if _, stderr, code := k3("convert", s3Source(t), filepath.Join(dir, "out"), "-q"); code != 0 {
			return fmt.Errorf("convert: exit %d: %s", code, stderr)
		}
		return nil
	}), "out")
}

// s3Local is a local run of cmd (shard or export) on s3Source into a
// directory of its own, with the flags given, once per test binary: the
// twin the bucket runs of that command must match. Tests only read it.
func s3Local(t *testing.T, cmd string, flags ...string) string {
	t.Helper()
	name := strings.Join(append([]string{"s3-tiny-16", cmd}, flags...), "-")
	return filepath.Join(testckpt.Dir(t, name, func(dir string) error {
		if _, stderr, code := k3(append([]string{cmd, s3Source(t), filepath.Join(dir, "out"), "-q"}, flags...)...); code != 0 {
			return fmt.Errorf("%s: exit %d: %s", cmd, code, stderr)
		}
		return nil
	}), "out")
}

// sameOutputs fails unless trees a and b hold the same files with the same
// bytes, the dot files (a run's own records: stamps, locks) left out.
func sameOutputs(t *testing.T, a, b string) {
	t.Helper()
	read := func(root string) map[string][]byte {
		m := map[string][]byte{}
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
				rel, _ := filepath.Rel(root, p)
				m[filepath.ToSlash(rel)], _ = os.ReadFile(p)
			}
			return nil
		})
		return m
	}
	ma, mb := read(a), read(b)
	if len(ma) == 0 || len(ma) != len(mb) {
		t.Errorf("%d files in %s, %d in %s", len(ma), a, len(mb), b)
	}
	for name, x := range ma {
		if y, ok := mb[name]; !ok || !bytes.Equal(x, y) {
			t.Errorf("%s: differs between %s and %s (present: %v)", name, a, b, ok)
		}
	}
}

// TestS3Sources runs every reading command on a small replica in a bucket of
// a real S3 server on loopback and on the same directory: the same outputs,
// byte for byte; and the errors of a wrong location name bucket and key.
func TestS3Sources(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MinIO and converts the 16-layer replica twice")
	}
	srv := s3test.Start(t)
	src := s3Source(t)
	srv.Bucket(t, "models")
	srv.PutDir(t, src, "models", "org/tiny")
	const url = "s3://models/org/tiny"
	tmp := t.TempDir()
	must := func(args ...string) string {
		t.Helper()
		out, stderr, code := k3(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		return out
	}

	t.Run("inspect", func(t *testing.T) {
		a := must("inspect", src, "--json")
		b := must("inspect", url, "--json")
		// The location is named in the report, and the bytes read to open
		// it differ (a directory's index is read whole, a bucket's with the
		// headers it needs); nothing else may.
		b = strings.ReplaceAll(b, url+"/", src+"/")
		b = strings.ReplaceAll(b, url, src)
		a, b = bytesReadRE.ReplaceAllString(a, ""), bytesReadRE.ReplaceAllString(b, "")
		if a != b {
			if d := os.Getenv("K3CKPT_S3_DUMP"); d != "" {
				os.WriteFile(filepath.Join(d, "local.json"), []byte(a), 0o644)
				os.WriteFile(filepath.Join(d, "s3.json"), []byte(b), 0o644)
			}
			t.Errorf("inspect differs between the directory and the bucket:\n%.600s\n---\n%.600s", a, b)
		}
	})
	t.Run("convert", func(t *testing.T) {
		fromS3 := filepath.Join(tmp, "c-s3")
		must("convert", url, fromS3, "-q", "--connections", "4")
		sameOutputs(t, s3Converted(t), fromS3)
	})
	t.Run("verify", func(t *testing.T) {
		// verify reads the source in small sequential pieces: through
		// read-ahead windows they take far fewer requests than the
		// source has tensors (one request per read took one or more each).
		out := s3Converted(t)
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		b, _ := os.ReadFile(filepath.Join(src, "model.safetensors.index.json"))
		if err := json.Unmarshal(b, &idx); err != nil || len(idx.WeightMap) < 1000 {
			t.Fatalf("index of %s: %v, %d tensors", src, err, len(idx.WeightMap))
		}
		p := srv.NewProxy(t)
		t.Setenv("AWS_ENDPOINT_URL_S3", p.URL)
		must("verify", url, out, "-q")
		t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
		if n := p.Requests.Load(); n == 0 || n > int64(len(idx.WeightMap)/10) {
			t.Errorf("verify of a bucket source made %d requests for %d tensors: want at most a tenth", n, len(idx.WeightMap))
		}
	})
	t.Run("shard", func(t *testing.T) {
		fromS3 := filepath.Join(tmp, "s-s3")
		must("shard", url+"/", fromS3, "-q")
		sameOutputs(t, s3Local(t, "shard"), fromS3)
	})
	t.Run("export", func(t *testing.T) {
		// The local twin is rank 0 of the export of every rank: a rank's
		// directory does not depend on which others are written.
		local, fromS3 := filepath.Join(tmp, "e-local"), filepath.Join(tmp, "e-s3")
		if err := os.CopyFS(filepath.Join(local, "rank-00"), os.DirFS(filepath.Join(s3Local(t, "export", "--layout", "dp16"), "rank-00"))); err != nil {
			t.Fatal(err)
		}
		must("export", url+"/"+"model.safetensors.index.json", fromS3, "--layout", "dp16", "--ranks", "0", "-q")
		sameOutputs(t, local, fromS3)
	})
	t.Run("errors", func(t *testing.T) {
		for _, c := range []struct{ url, want string }{
			{"s3://models/org/nosuch", `s3://models/org/nosuch/`},
			{"s3://nosuchbucket/org/tiny", `bucket "nosuchbucket" does not exist`},
			{"s3://models/org/tiny/nosuch.safetensors", `no object "org/tiny/nosuch.safetensors" in bucket "models"`},
		} {
			_, stderr, code := k3("inspect", c.url)
			if code == 0 || !strings.Contains(stderr, c.want) {
				t.Errorf("inspect %s: exit %d, %q; want an error with %q", c.url, code, stderr, c.want)
			}
		}
		t.Setenv("AWS_ACCESS_KEY_ID", "nobody")
		_, stderr, code := k3("convert", url, filepath.Join(tmp, "refused"))
		if code == 0 || !strings.Contains(stderr, "access refused") || !strings.Contains(stderr, "s3://models/org/tiny/") || !strings.Contains(stderr, "AWS_ACCESS_KEY_ID") {
			t.Errorf("wrong credentials: exit %d, %q", code, stderr)
		}
		if _, err := os.Stat(filepath.Join(tmp, "refused")); err == nil {
			t.Errorf("a refused source left %s behind", filepath.Join(tmp, "refused"))
		}
	})
}
