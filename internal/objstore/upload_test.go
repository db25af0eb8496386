package objstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/objstore"
	"github.com/k3ckpt/k3ckpt/internal/objstore/s3test"
)

func bucket(t *testing.T, raw string) *objstore.Bucket {
	t.Helper()
	u, err := objstore.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := objstore.New(context.Background(), u, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func get(t *testing.T, srv *s3test.Server, bucket, key string) []byte {
	t.Helper()
	out, err := srv.Client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestUploads streams objects through filewrite into multipart uploads of a
// real S3 server: the object appears only when committed, with the bytes
// and the sha256 written (crypto/sha256 the reference); a part corrupted on
// the way is refused by the store; a killed upload is aborted by the rerun.
func TestUploads(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "out")
	ctx := context.Background()
	data := make([]byte, 3*objstore.PartSize+777)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}

	t.Run("stream", func(t *testing.T) {
		b := bucket(t, "s3://out/ckpt")
		for _, n := range []int{len(data), 5, 0} {
			up := b.Create(ctx, "model.safetensors", nil)
			f := filewrite.CreateSink(up, "test object", nil, nil)
			for off := 0; off < n; off += 1 << 20 {
				if _, err := f.Write(data[off:min(off+1<<20, n)]); err != nil {
					t.Fatal(err)
				}
			}
			f.Finish()
			if _, _, ok, err := b.Stat(ctx, "model.safetensors"); ok || err != nil {
				t.Errorf("%d bytes: the object is there before the commit (%v)", n, err)
			}
			sum := f.SHA256()
			if err := f.Commit(); err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
			want := sha256.Sum256(data[:n])
			if sum != hex.EncodeToString(want[:]) {
				t.Errorf("%d bytes: sha256 %s, crypto/sha256 says %x", n, sum, want)
			}
			if got := get(t, srv, "out", "ckpt/model.safetensors"); !bytes.Equal(got, data[:n]) {
				t.Errorf("%d bytes: the object has %d bytes, not those written", n, len(got))
			}
			srv.Client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("out"), Key: aws.String("ckpt/model.safetensors")})
		}
	})

	t.Run("corrupted part", func(t *testing.T) {
		p := srv.NewProxy(t)
		t.Setenv("AWS_ENDPOINT_URL_S3", p.URL)
		p.Corrupt.Store(1)
		b := bucket(t, "s3://out/bad")
		up := b.Create(ctx, "x.safetensors", nil)
		f := filewrite.CreateSink(up, "test object", nil, nil)
		f.Write(data)
		err := f.Commit()
		if err == nil || p.Corrupted.Load() != 1 {
			t.Fatalf("a corrupted part was accepted: %v (corrupted %d)", err, p.Corrupted.Load())
		}
		t.Log(err)
		if _, _, ok, _ := b.Stat(ctx, "x.safetensors"); ok {
			t.Errorf("a failed upload left an object")
		}
	})

	t.Run("killed", func(t *testing.T) {
		b := bucket(t, "s3://out/killed")
		up := b.Create(ctx, "a.safetensors", nil)
		if _, err := up.WriteAt(data[:objstore.PartSize+1], 0); err != nil {
			t.Fatal(err)
		}
		// The run dies here, once its first part is stored: the upload is
		// neither completed nor aborted.
		for i := 0; ; i++ {
			var err error
			var n int
			ups, err := srv.Client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("out"), Prefix: aws.String("killed/a.safetensors")})
			if err == nil && len(ups.Uploads) == 1 {
				var parts *s3.ListPartsOutput
				parts, err = srv.Client.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("out"), Key: aws.String("killed/a.safetensors"), UploadId: ups.Uploads[0].UploadId})
				if err == nil {
					n = len(parts.Parts)
				}
			}
			if n == 1 {
				break
			}
			if i == 100 {
				t.Fatalf("the first part was not stored: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, _, ok, _ := b.Stat(ctx, "a.safetensors"); ok {
			t.Fatal("an unfinished upload is visible under its key")
		}
		uploads := func() int {
			left, err := srv.Client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("out"), Prefix: aws.String("killed/a.safetensors")})
			if err != nil {
				t.Fatal(err)
			}
			return len(left.Uploads)
		}
		if n := uploads(); n != 1 {
			t.Fatalf("%d unfinished uploads before the rerun, want 1", n)
		}
		rerun := bucket(t, "s3://out/killed")
		up2 := rerun.Create(ctx, "a.safetensors", nil)
		f := filewrite.CreateSink(up2, "test object", nil, nil)
		f.Write(data)
		if err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := get(t, srv, "out", "killed/a.safetensors"); !bytes.Equal(got, data) {
			t.Error("the resumed upload's object differs")
		}
		if n := uploads(); n != 0 {
			t.Errorf("%d unfinished uploads left after the rerun (the killed one not aborted)", n)
		}
	})
}

// TestGSAlias reads and writes gs:// through the S3-compatible XML API the
// way GCS is reached with HMAC keys (GS_ENDPOINT_URL, GS_ACCESS_KEY_ID,
// GS_SECRET_ACCESS_KEY; Content-MD5 part checks), against MinIO standing in
// for storage.googleapis.com; the AWS settings are cleared so none is used.
func TestGSAlias(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "gcs")
	// The server's credentials, as Start set them, under gs://'s names only.
	t.Setenv("GS_ACCESS_KEY_ID", os.Getenv("AWS_ACCESS_KEY_ID"))
	t.Setenv("GS_SECRET_ACCESS_KEY", os.Getenv("AWS_SECRET_ACCESS_KEY"))
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3"} {
		t.Setenv(k, "")
	}
	t.Setenv("GS_ENDPOINT_URL", srv.Endpoint)
	ctx := context.Background()
	data := make([]byte, objstore.PartSize+999)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b := bucket(t, "gs://gcs/m")
	// A multipart upload, and an object of one PUT (each with Content-MD5).
	for name, n := range map[string]int{"w.safetensors": len(data), "small.json": 5} {
		up := b.Create(ctx, name, nil)
		f := filewrite.CreateSink(up, "test object", nil, nil)
		f.Write(data[:n])
		if err := f.Commit(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := get(t, srv, "gcs", "m/"+name); !bytes.Equal(got, data[:n]) {
			t.Errorf("%s: %d bytes stored, not the %d written", name, len(got), n)
		}
	}
	s, _ := source(t, "gs://gcs/m")
	file, err := s.Open(ctx, "w.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2999)
	if _, err := file.ReadAt(got, int64(objstore.PartSize-2000)); err != nil || !bytes.Equal(got, data[objstore.PartSize-2000:]) {
		t.Errorf("gs:// read across the part boundary: %v", err)
	}
	t.Setenv("GS_SECRET_ACCESS_KEY", "wrong")
	s, _ = source(t, "gs://gcs/m")
	if _, err := s.Open(ctx, "w.safetensors"); err == nil || !strings.Contains(err.Error(), "GS_SECRET_ACCESS_KEY") || !strings.Contains(err.Error(), "gs://gcs/m/w.safetensors") {
		t.Errorf("gs:// with a wrong HMAC secret: %v", err)
	}
}
