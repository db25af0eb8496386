//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/k3ckpt/k3ckpt/internal/objstore/s3test"
	"github.com/k3ckpt/k3ckpt/layout"
)

// TestS3Destination converts the 16-layer replica (s3Source) into buckets
// of a real S3 server on loopback: the objects are byte-identical to a
// local run's files (from a local source and from the bucket); a run killed
// mid-upload (SIGKILL while an object is on its way) leaves no partial
// object and no index or manifest, and resumes to the same objects with no
// unfinished upload; two workers and merge write one prefix; a throttling
// server is waited out; a missing bucket, wrong credentials and a prefix
// claimed by another state directory are clear errors that write nothing.
func TestS3Destination(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MinIO and converts the 16-layer replica several times")
	}
	srv := s3test.Start(t)
	src := s3Source(t)
	srv.Bucket(t, "models")
	srv.PutDir(t, src, "models", "tiny")
	srv.Bucket(t, "out")
	local := s3Converted(t)
	shards, _ := filepath.Glob(filepath.Join(local, "model-*-of-*.safetensors"))
	if len(shards) < 10 {
		t.Fatalf("%s holds %d shards", local, len(shards))
	}
	must := func(t *testing.T, args ...string) string {
		t.Helper()
		out, stderr, code := k3(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		return out
	}
	// same checks that prefix holds exactly the local run's files, byte for
	// byte, and nothing else (no claim, no unfinished upload).
	same := func(t *testing.T, prefix string) {
		t.Helper()
		got := filepath.Join(t.TempDir(), "got")
		keys := srv.GetDir(t, "out", prefix, got)
		sameOutputs(t, local, got)
		var want []string
		filepath.WalkDir(local, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.Contains(p, "/.") {
				rel, _ := filepath.Rel(local, p)
				want = append(want, filepath.ToSlash(rel))
			}
			return nil
		})
		slices.Sort(keys)
		slices.Sort(want)
		if !slices.Equal(keys, want) {
			t.Errorf("%s holds %d objects %.200v, the local run %d files", prefix, len(keys), keys, len(want))
		}
		if n := unfinished(t, srv, prefix, keys); n > 0 {
			t.Errorf("%s: %d unfinished multipart uploads left", prefix, n)
		}
	}
	state := func() string { return filepath.Join(t.TempDir(), "state") }

	t.Run("local source", func(t *testing.T) {
		out := must(t, "convert", src, "s3://out/a", "--state-dir", state(), "-q", "--json")
		var res struct{ Finalized bool }
		json.Unmarshal([]byte(out), &res)
		if !res.Finalized {
			t.Errorf("not finalized: %s", out)
		}
		same(t, "a")
		// verify reads the bucket's output against the source.
		must(t, "verify", src, "s3://out/a", "-q")
		// One object changed in the bucket: verify fails naming it; a rerun
		// with no state keeps every other object (the manifest's hashes,
		// read back) and writes that one again.
		shard := filepath.Base(shards[1])
		b, _ := os.ReadFile(filepath.Join(local, shard))
		b = bytes.Clone(b)
		b[len(b)-1] ^= 1
		srv.Put("out", "a/"+shard, bytes.NewReader(b))
		if out, _, code := k3("verify", src, "s3://out/a"); code != 1 || !strings.Contains(out, shard) {
			t.Errorf("verify of a changed object: exit %d, %.300q", code, out)
		}
		out = must(t, "convert", src, "s3://out/a", "--state-dir", state(), "-q", "--json")
		var rerun struct{ Written, Skipped []string }
		json.Unmarshal([]byte(out), &rerun)
		if !slices.Equal(rerun.Written, []string{shard}) || len(rerun.Skipped) < len(shards)-1 {
			t.Errorf("rerun wrote %v, kept %d files: want only %s written, the other %d shards kept", rerun.Written, len(rerun.Skipped), shard, len(shards)-1)
		}
		same(t, "a")
	})
	// The bucket-to-bucket run goes through a server that throttles its
	// first requests: one conversion proves both.
	t.Run("bucket source, throttled", func(t *testing.T) {
		p := srv.NewProxy(t)
		p.Throttle.Store(3)
		t.Setenv("AWS_ENDPOINT_URL_S3", p.URL)
		must(t, "convert", "s3://models/tiny", "s3://out/b", "--state-dir", state(), "-q", "--jobs", "3")
		if p.Throttled.Load() != 3 {
			t.Errorf("%d requests throttled, want 3", p.Throttled.Load())
		}
		t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
		same(t, "b")
	})
	t.Run("killed", func(t *testing.T) {
		p := srv.NewProxy(t)
		st := state()
		args := []string{"convert", src, "s3://out/k", "--state-dir", st, "-q", "--jobs", "2"}
		child := exec.Command(os.Args[0], args...)
		child.Env = append(os.Environ(), "K3CKPT_TEST_AS_MAIN=1", "AWS_ENDPOINT_URL_S3="+p.URL)
		var stderr bytes.Buffer
		child.Stderr = &stderr
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		// Once the run has recorded a completed object, hold every later
		// upload and kill the run there: a fixed count of uploads let
		// through can all land before their records do.
		deadline := time.Now().Add(time.Minute)
		for !convertRecorded(st) && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
		p.Hold.Store(max(p.Puts.Load(), 1))
		for p.Held.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if p.Held.Load() == 0 {
			child.Process.Kill()
			child.Wait()
			t.Fatalf("no part was held: %s", stderr.String())
		}
		child.Process.Kill()
		child.Wait()
		left := srv.GetDir(t, "out", "k", filepath.Join(t.TempDir(), "left"))
		if len(left) == 0 || len(left) >= len(shards) || slices.Contains(left, "model.safetensors.index.json") || slices.Contains(left, "k3ckpt-manifest.json") {
			t.Errorf("the killed run left %d objects %.300v: want some shards, no index, no manifest", len(left), left)
		}
		for _, name := range left {
			if name == ".k3ckpt/claim" {
				continue
			}
			a, _ := os.ReadFile(filepath.Join(local, filepath.FromSlash(name)))
			if n, _, _ := statObject(srv, "out", "k/"+name); n != int64(len(a)) {
				t.Errorf("the killed run left %s with %d bytes, not the %d of the file", name, n, len(a))
			}
		}
		out := must(t, append(args, "--json")...)
		var res struct {
			Written, Skipped []string
		}
		json.Unmarshal([]byte(out), &res)
		if len(res.Skipped) == 0 || len(res.Written) == 0 {
			t.Errorf("the rerun wrote %d files and kept %d: want some of each", len(res.Written), len(res.Skipped))
		}
		same(t, "k")
	})
	t.Run("workers", func(t *testing.T) {
		st := state()
		must(t, "convert", src, "s3://out/w", "--state-dir", st, "--worker", "1/2", "-q")
		if _, _, ok := statObject(srv, "out", "w/manifest.json"); ok {
			t.Fatal("a manifest after one worker of two")
		}
		_, stderr, code := k3("merge", "s3://out/w", "--state-dir", st, "--dry-run")
		if code != 1 {
			t.Errorf("merge --dry-run with a slice missing: exit %d (%s)", code, stderr)
		}
		// Another state directory for the prefix being written.
		_, stderr, code = k3("convert", src, "s3://out/w", "--state-dir", state(), "-q")
		if code == 0 || !strings.Contains(stderr, "another state directory") || !strings.Contains(stderr, "s3://out/w/.k3ckpt/claim") {
			t.Errorf("a second state directory: exit %d, %q", code, stderr)
		}
		must(t, "convert", src, "s3://out/w", "--state-dir", st, "--worker", "0/2", "-q")
		must(t, "merge", "s3://out/w", "--state-dir", st, "-q") // finalized by the last worker: nothing to do
		same(t, "w")
	})
	t.Run("errors", func(t *testing.T) {
		st := state()
		_, stderr, code := k3("convert", src, "s3://nosuchbucket/x", "--state-dir", st)
		if code == 0 || !strings.Contains(stderr, `bucket "nosuchbucket" does not exist`) || !strings.Contains(stderr, "s3://nosuchbucket/x/") {
			t.Errorf("missing bucket: exit %d, %q", code, stderr)
		}
		// A prefix holding other objects.
		srv.Put("out", "d/notes.txt", strings.NewReader("x"))
		_, stderr, code = k3("convert", src, "s3://out/d", "--state-dir", state(), "-q")
		if code == 0 || !strings.Contains(stderr, "s3://out/d is not empty (notes.txt)") {
			t.Errorf("a prefix with other objects: exit %d, %q", code, stderr)
		}
		secret := os.Getenv("AWS_SECRET_ACCESS_KEY")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
		_, stderr, code = k3("convert", src, "s3://out/e", "--state-dir", state())
		if code == 0 || !strings.Contains(stderr, "s3://out/e/") || !strings.Contains(stderr, "AWS_SECRET_ACCESS_KEY") {
			t.Errorf("wrong credentials: exit %d, %q", code, stderr)
		}
		t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
		for _, prefix := range []string{"e"} {
			if keys := srv.GetDir(t, "out", prefix, t.TempDir()); len(keys) > 0 {
				t.Errorf("a refused run left %v under %s", keys, prefix)
			}
		}
	})
}

// unfinished counts the multipart uploads left under prefix for the names
// given (MinIO lists uploads by exact key only).
func unfinished(t *testing.T, srv *s3test.Server, prefix string, names []string) int {
	t.Helper()
	n := 0
	for _, name := range names {
		out, err := srv.Client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String("out"), Prefix: aws.String(prefix + "/" + name)})
		if err != nil {
			t.Fatal(err)
		}
		n += len(out.Uploads)
	}
	return n
}

func statObject(srv *s3test.Server, bucket, key string) (int64, string, bool) {
	h, err := srv.Client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return 0, "", false
	}
	return aws.ToInt64(h.ContentLength), aws.ToString(h.ETag), true
}

// TestS3LayoutDestination runs shard, export and reassemble of the
// 16-layer replica (s3Source; the whole tiny one for the multipart export)
// into buckets of a real S3 server on loopback: the objects are byte-identical to a local
// run's files (from a local and from a bucket source), with no state left
// under the prefix and no unfinished upload; each directory's SHA256SUMS
// checks against the objects read back, and names one changed; an export
// with 5 MiB parts gets objects of several parts whose store-side CRC32C is
// S3's composite one of the local file; reassemble --check refuses a DST
// with a changed side file before writing; a rerun keeps every object; a
// run SIGKILLed mid-upload leaves no layout.json of the directory it was
// writing and resumes to the same objects; a missing bucket, wrong
// credentials and a prefix holding other objects are clear errors naming
// bucket and key that write nothing.
func TestS3LayoutDestination(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MinIO and writes the 16-layer replica's layouts several times")
	}
	srv := s3test.Start(t)
	tmp := t.TempDir()
	src, tiny := s3Source(t), s3Tiny(t)
	srv.Bucket(t, "models")
	srv.PutDir(t, tiny, "models", "tiny")
	srv.Bucket(t, "out")
	must := func(t *testing.T, args ...string) string {
		t.Helper()
		out, stderr, code := k3(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		return out
	}
	state := func() string { return filepath.Join(t.TempDir(), "state") }
	// same checks that prefix holds exactly local's files, byte for byte,
	// and nothing else (no claim, no unfinished upload).
	same := func(t *testing.T, local, prefix string) {
		t.Helper()
		got := filepath.Join(t.TempDir(), "got")
		keys := srv.GetDir(t, "out", prefix, got)
		var want []string
		filepath.WalkDir(local, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
				rel, _ := filepath.Rel(local, p)
				want = append(want, filepath.ToSlash(rel))
			}
			return nil
		})
		slices.Sort(keys)
		slices.Sort(want)
		if !slices.Equal(keys, want) {
			t.Fatalf("%s holds %d objects %.300v, the local run %d files %.300v", prefix, len(keys), keys, len(want), want)
		}
		sameOutputs(t, local, got)
		if n := unfinished(t, srv, prefix, keys); n > 0 {
			t.Errorf("%s: %d unfinished multipart uploads left", prefix, n)
		}
	}
	type result struct {
		Result struct{ Written, Kept, Changed int }
	}
	run := func(t *testing.T, args ...string) result {
		t.Helper()
		var r result
		if err := json.Unmarshal([]byte(must(t, append(args, "-q", "--json")...)), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	localShard, localExport, localRe := s3Local(t, "shard"), s3Local(t, "export", "--layout", "dp16"), filepath.Join(tmp, "re")
	must(t, "reassemble", localExport, localRe, "-q")
	// The ranks the bucket export writes, from the whole tiny replica.
	localTinyRanks := filepath.Join(tmp, "export-tiny")
	must(t, "export", tiny, localTinyRanks, "--layout", "dp16", "--ranks", "0,7,15", "-q")

	t.Run("shard", func(t *testing.T) {
		st := state()
		r := run(t, "shard", src, "s3://out/shard", "--state-dir", st)
		same(t, localShard, "shard")
		// The SHA256SUMS of every stage, read back from the bucket; one
		// object changed in place is named.
		ctx := context.Background()
		nl, _, err := layout.CheckSums(ctx, localShard)
		if err != nil || nl < 16*3 {
			t.Fatalf("CheckSums of the local shard: %d files, %v", nl, err)
		}
		if n, _, err := layout.CheckSums(ctx, "s3://out/shard"); err != nil || n != nl {
			t.Errorf("CheckSums of the bucket's shard: %d files, %v; want the local shard's %d", n, err, nl)
		}
		const victim = "stage-05/config.json"
		b, err := os.ReadFile(filepath.Join(localShard, filepath.FromSlash(victim)))
		if err != nil {
			t.Fatal(err)
		}
		srv.Put("out", "shard/"+victim, bytes.NewReader(append(b, ' ')))
		if _, _, err := layout.CheckSums(ctx, "s3://out/shard"); err == nil || !strings.Contains(err.Error(), "s3://out/shard/"+victim) {
			t.Errorf("CheckSums of a changed object: %v", err)
		}
		srv.Put("out", "shard/"+victim, bytes.NewReader(b))
		// A rerun keeps every object (its record is gone: the finished
		// output's layout.json and each file's size and header).
		again := run(t, "shard", src, "s3://out/shard", "--state-dir", state())
		if again.Result.Written != 0 || again.Result.Kept != r.Result.Written {
			t.Errorf("rerun over the finished shard wrote %d and kept %d, want 0 and %d", again.Result.Written, again.Result.Kept, r.Result.Written)
		}
		same(t, localShard, "shard")
	})
	t.Run("export from a bucket", func(t *testing.T) {
		// 5 MiB parts (S3's least): each rank's 10.5 MiB file goes up
		// as a multipart upload of three parts. Three ranks (the first, a
		// middle and the last) are the local export's directories of
		// theirs, byte for byte.
		const part = 5 << 20
		t.Setenv("K3CKPT_S3_PART_SIZE", strconv.Itoa(part))
		must(t, "export", "s3://models/tiny", "s3://out/export", "--layout", "dp16", "--ranks", "0,7,15", "--state-dir", state(), "-q", "--jobs", "3")
		ranks := filepath.Join(t.TempDir(), "ranks")
		for _, dir := range []string{"rank-00", "rank-07", "rank-15"} {
			if err := os.CopyFS(filepath.Join(ranks, dir), os.DirFS(filepath.Join(localTinyRanks, dir))); err != nil {
				t.Fatal(err)
			}
		}
		same(t, ranks, "export")
		// The store checked every part against the CRC32C sent with it: its
		// checksum of the object is S3's composite one, the CRC32C of the
		// parts' CRC32Cs, computed here from the local file.
		for _, dir := range []string{"rank-00", "rank-07", "rank-15"} {
			name := dir + "/model-00001-of-000001.safetensors"
			b, err := os.ReadFile(filepath.Join(localTinyRanks, filepath.FromSlash(name)))
			if err != nil {
				t.Fatal(err)
			}
			parts := (len(b) + part - 1) / part
			castagnoli := crc32.MakeTable(crc32.Castagnoli)
			var sums []byte
			for off := 0; off < len(b); off += part {
				sums = binary.BigEndian.AppendUint32(sums, crc32.Checksum(b[off:min(off+part, len(b))], castagnoli))
			}
			want := base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.Checksum(sums, castagnoli))) + "-" + strconv.Itoa(parts)
			h, err := srv.Client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("out"), Key: aws.String("export/" + name), ChecksumMode: types.ChecksumModeEnabled})
			if err != nil {
				t.Fatal(err)
			}
			if got := aws.ToString(h.ChecksumCRC32C); parts < 3 || got != want || !strings.HasSuffix(aws.ToString(h.ETag), "-"+strconv.Itoa(parts)+`"`) {
				t.Errorf("%s (%d bytes): ETag %s, CRC32C %q; want %d parts, CRC32C %q", name, len(b), aws.ToString(h.ETag), got, parts, want)
			}
		}
	})
	t.Run("reassemble", func(t *testing.T) {
		must(t, "reassemble", localExport, "s3://out/re", "--state-dir", state(), "--check", src, "-q")
		same(t, localRe, "re")
		// --check reads DST and OUT back against their SHA256SUMS: a side
		// file of a stage other than the first, which the reassembly does
		// not read, changed after the shard run wrote it, is found.
		tampered := filepath.Join(t.TempDir(), "tampered")
		if err := os.CopyFS(tampered, os.DirFS(localShard)); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(tampered, "stage-03", "config.json")
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, bytes.Replace(b, []byte("{"), []byte("{ "), 1), 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := k3("reassemble", tampered, "s3://out/re-t", "--state-dir", state(), "--check", src, "-q")
		if code == 0 || !strings.Contains(stderr, cfg) || !strings.Contains(stderr, "SHA256SUMS") {
			t.Errorf("reassemble --check of a changed side file: exit %d, %q", code, stderr)
		}
		if keys := srv.GetDir(t, "out", "re-t", t.TempDir()); len(keys) > 0 {
			t.Errorf("reassemble --check of a damaged DST wrote %d objects", len(keys))
		}
	})
	t.Run("killed", func(t *testing.T) {
		p := srv.NewProxy(t)
		st := state()
		args := []string{"export", src, "s3://out/k", "--layout", "dp16", "--state-dir", st, "-q", "--jobs", "2"}
		child := exec.Command(os.Args[0], args...)
		child.Env = append(os.Environ(), "K3CKPT_TEST_AS_MAIN=1", "AWS_ENDPOINT_URL_S3="+p.URL)
		var stderr bytes.Buffer
		child.Stderr = &stderr
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		// Once a run record holds a completed object, hold every later
		// upload and kill the run there: which uploads finish first
		// (single PUTs or multipart parts) varies with the load.
		deadline := time.Now().Add(time.Minute)
		for !recordsCompleted(st) && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
		p.Hold.Store(max(p.Puts.Load(), 1))
		for p.Held.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		child.Process.Kill()
		child.Wait()
		if p.Held.Load() == 0 {
			t.Fatalf("no upload was held: %s", stderr.String())
		}
		left := srv.GetDir(t, "out", "k", filepath.Join(t.TempDir(), "left"))
		if len(left) < 2 {
			t.Errorf("the killed run left %d objects: want some", len(left))
		}
		// A directory's layout.json goes last: only finished ones have it,
		// and a finished one holds all its local files.
		for _, name := range left {
			if dir, ok := strings.CutSuffix(name, "/layout.json"); ok {
				ents, _ := os.ReadDir(filepath.Join(localExport, dir))
				for _, e := range ents {
					if !slices.Contains(left, dir+"/"+e.Name()) {
						t.Errorf("%s is there, %s/%s is not", name, dir, e.Name())
					}
				}
			}
		}
		r := run(t, args...)
		if r.Result.Kept == 0 || r.Result.Written == 0 {
			t.Errorf("the rerun wrote %d files and kept %d: want some of each", r.Result.Written, r.Result.Kept)
		}
		same(t, localExport, "k")
	})
	t.Run("errors", func(t *testing.T) {
		_, stderr, code := k3("shard", src, "s3://nosuchbucket/x", "--state-dir", state())
		if code == 0 || !strings.Contains(stderr, `bucket "nosuchbucket" does not exist`) || !strings.Contains(stderr, "s3://nosuchbucket/x/") {
			t.Errorf("missing bucket: exit %d, %q", code, stderr)
		}
		srv.Put("out", "d/stage-03/notes.txt", strings.NewReader("x"))
		_, stderr, code = k3("shard", src, "s3://out/d", "--state-dir", state(), "-q")
		if code == 0 || !strings.Contains(stderr, "s3://out/d/stage-03/ holds notes.txt") {
			t.Errorf("a prefix with other objects: exit %d, %q", code, stderr)
		}
		secret := os.Getenv("AWS_SECRET_ACCESS_KEY")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
		_, stderr, code = k3("export", src, "s3://out/e", "--layout", "dp16", "--state-dir", state())
		if code == 0 || !strings.Contains(stderr, "s3://out/e/") || !strings.Contains(stderr, "AWS_SECRET_ACCESS_KEY") {
			t.Errorf("wrong credentials: exit %d, %q", code, stderr)
		}
		t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
		if keys := srv.GetDir(t, "out", "e", t.TempDir()); len(keys) > 0 {
			t.Errorf("a refused run left %v under e", keys)
		}
		if keys := srv.GetDir(t, "out", "d", t.TempDir()); len(keys) != 1 {
			t.Errorf("a refused run left %v under d", keys)
		}
	})
}

// convertRecorded reports whether a conversion's done records under the
// state directory st list an object the run completed (a non-empty ETag).
func convertRecorded(st string) bool {
	found := false
	filepath.WalkDir(st, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(filepath.Dir(p)) != "done" || found {
			return nil
		}
		b, _ := os.ReadFile(p)
		for line := range bytes.Lines(b) {
			var r struct {
				ETag string `json:"etag"`
			}
			found = found || json.Unmarshal(line, &r) == nil && r.ETag != ""
		}
		return nil
	})
	return found
}

// recordsCompleted reports whether a bucket run record under the state
// directory st lists an object the run completed.
func recordsCompleted(st string) bool {
	found := false
	filepath.WalkDir(st, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "run.json" || found {
			return nil
		}
		var r struct {
			Files map[string]struct {
				ETag string `json:"etag"`
			} `json:"files"`
		}
		if b, err := os.ReadFile(p); err == nil && json.Unmarshal(b, &r) == nil {
			for _, f := range r.Files {
				found = found || f.ETag != ""
			}
		}
		return nil
	})
	return found
}
