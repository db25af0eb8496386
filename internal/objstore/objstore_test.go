package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/objstore"
	"github.com/k3ckpt/k3ckpt/internal/objstore/s3test"
	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
)

// The test binary's shared MinIO keeps its data in a testckpt.Dir.
func TestMain(m *testing.M) { testckpt.Main(m) }

func TestParse(t *testing.T) {
	for raw, want := range map[string]objstore.URL{
		"s3://bucket":             {Scheme: "s3", Bucket: "bucket"},
		"s3://bucket/":            {Scheme: "s3", Bucket: "bucket"},
		"s3://my-bucket/a/b/":     {Scheme: "s3", Bucket: "my-bucket", Key: "a/b"},
		"gs://b.c.d/x/model.json": {Scheme: "gs", Bucket: "b.c.d", Key: "x/model.json"},
	} {
		got, err := objstore.Parse(raw)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{"s3://", "s3://B", "s3://ab", "s3://a..b/x", "s3://bucket/a//b", "s3://bucket/../x", "ftp://bucket/x", "s3://-bucket/x"} {
		if u, err := objstore.Parse(raw); err == nil || !errors.Is(err, remote.ErrSource) {
			t.Errorf("Parse(%q) = %+v, %v; want an ErrSource error", raw, u, err)
		}
	}
}

// A part size outside S3's bounds is refused naming the variable; one
// inside is taken.
func TestPartSizeEnv(t *testing.T) {
	u, _ := objstore.Parse("s3://bucket/x")
	for v, ok := range map[string]bool{"": true, "5242880": true, "5242879": false, "6G": false, "5368709121": false} {
		_, err := objstore.New(context.Background(), u, objstore.Options{Env: func(k string) string {
			if k == "K3CKPT_S3_PART_SIZE" {
				return v
			}
			return ""
		}})
		if ok != (err == nil) || !ok && !strings.Contains(err.Error(), "K3CKPT_S3_PART_SIZE") {
			t.Errorf("K3CKPT_S3_PART_SIZE=%q: %v", v, err)
		}
	}
}

// source is a remote.Source over bucket/prefix of the server.
func source(t *testing.T, raw string) (*remote.Source, *objstore.Bucket) {
	t.Helper()
	u, err := objstore.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := objstore.New(context.Background(), u, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := remote.NewStoreSource(context.Background(), u.Dir(), b, remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b.OnRetry(s.Retried)
	return s, b
}

// TestMinIO runs the reads against a real S3 server on loopback.
func TestMinIO(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "ckpt")
	data := make([]byte, 3<<20+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	put := func(key string, b []byte) {
		t.Helper()
		if err := srv.Put("ckpt", key, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	put("p/a.bin", data)
	put("p/empty.bin", nil)
	put("p/small.bin", []byte("abc"))
	put("p/sub/deeper.bin", []byte("x"))
	ctx := context.Background()

	t.Run("ranges", func(t *testing.T) {
		s, _ := source(t, "s3://ckpt/p")
		f, err := s.Open(ctx, "a.bin")
		if err != nil {
			t.Fatal(err)
		}
		if v := f.Version(); f.Size() != int64(len(data)) || !strings.HasPrefix(v, `"`) {
			t.Fatalf("size %d version %q, want %d and an ETag", f.Size(), v, len(data))
		}
		ranges := []remote.Range{{File: "a.bin", Off: 0, Len: 8}, {File: "a.bin", Off: 100, Len: 1000}, {File: "a.bin", Off: 1 << 20, Len: 2 << 20},
			{File: "small.bin", Off: 1, Len: 2}, {File: "empty.bin", Off: 0, Len: 0}}
		stream := s.Stream(ctx, ranges, remote.FetchOptions{Connections: 4, RequestSize: 1 << 20})
		for _, r := range ranges {
			got := make([]byte, r.Len)
			if _, err := stream.File(r.File).ReadAt(got, r.Off); err != nil {
				t.Fatalf("range %v: %v", r, err)
			}
			want := data[r.Off : r.Off+r.Len]
			if r.File == "small.bin" {
				want = []byte("bc")
			}
			if r.Len == 0 {
				want = nil
			}
			if !bytes.Equal(got, want) {
				t.Errorf("range %v: %d bytes differ from the object's", r, len(got))
			}
		}
		st, err := stream.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Needed != 8+1000+2<<20+2 || st.Fetched > 2*st.Needed || st.Unplanned != 0 {
			t.Errorf("stats %+v: fetched more than twice the needed bytes, or read outside the plan", st)
		}
		files, err := s.List(ctx)
		if err != nil || len(files) != 4 || files[3].Name != "sub/deeper.bin" || files[0].Size != int64(len(data)) {
			t.Fatalf("List = %v, %v; want the 4 objects under p/ with their sizes", files, err)
		}
	})

	// A conditional write over an existing object reports it not created,
	// without an error, whoever wrote it (a lost race for a claim).
	t.Run("ifAbsent", func(t *testing.T) {
		_, b := source(t, "s3://ckpt/p")
		for i, want := range []bool{true, false} {
			created, err := b.Put(ctx, "claim.json", bytes.NewReader([]byte("x")), 1, true)
			if err != nil || created != want {
				t.Fatalf("Put %d with ifAbsent: created %v, %v; want %v, no error", i+1, created, err, want)
			}
		}
		if err := b.Delete(ctx, "claim.json"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		s, _ := source(t, "s3://ckpt/p")
		_, err := s.Open(ctx, "nosuch.bin")
		if !errors.Is(err, remote.ErrNotFound) || !strings.Contains(err.Error(), "s3://ckpt/p/nosuch.bin") {
			t.Errorf("missing key: %v; want ErrNotFound naming s3://ckpt/p/nosuch.bin", err)
		}
		s, _ = source(t, "s3://nosuchbucket/p")
		_, err = s.Open(ctx, "a.bin")
		if err == nil || !strings.Contains(err.Error(), `bucket "nosuchbucket" does not exist`) || !strings.Contains(err.Error(), "s3://nosuchbucket/p/a.bin") {
			t.Errorf("missing bucket: %v", err)
		}
		t.Log(err)
		t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
		s, _ = source(t, "s3://ckpt/p")
		_, err = s.Open(ctx, "a.bin")
		if !errors.Is(err, remote.ErrAuth) || !strings.Contains(err.Error(), "s3://ckpt/p/a.bin") || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
			t.Errorf("wrong credentials: %v; want ErrAuth naming the object and the setting", err)
		}
		t.Log(err)
	})

	t.Run("changed", func(t *testing.T) {
		put("p/changing.bin", data[:1<<20])
		s, _ := source(t, "s3://ckpt/p")
		f, err := s.Open(ctx, "changing.bin")
		if err != nil {
			t.Fatal(err)
		}
		put("p/changing.bin", data[1<<20:2<<20])
		buf := make([]byte, 1000)
		_, err = f.ReadAt(buf, 5000)
		if !errors.Is(err, remote.ErrChanged) || !strings.Contains(err.Error(), "s3://ckpt/p/changing.bin") {
			t.Errorf("replaced object: %v; want ErrChanged naming it", err)
		}
		t.Log(err)
	})

	t.Run("throttled", func(t *testing.T) {
		p := srv.NewProxy(t)
		t.Setenv("AWS_ENDPOINT_URL_S3", p.URL)
		p.Throttle.Store(4)
		p.Cut.Store(2)
		s, _ := source(t, "s3://ckpt/p")
		got := make([]byte, len(data))
		stream := s.Stream(ctx, []remote.Range{{File: "a.bin", Off: 0, Len: int64(len(data))}}, remote.FetchOptions{Connections: 1, RequestSize: 1 << 20})
		if _, err := stream.File("a.bin").ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if st, err := stream.Close(); err != nil || st.Unplanned != 0 {
			t.Fatalf("stream: %v, %d bytes read outside the plan", err, st.Unplanned)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("the bytes read through the throttling proxy differ")
		}
		if p.Throttled.Load() != 4 || p.Cuts.Load() != 2 || s.Stats().Retries < 6 {
			t.Errorf("throttled %d, cut %d, retries %d; want 4, 2 and at least 6", p.Throttled.Load(), p.Cuts.Load(), s.Stats().Retries)
		}
	})
}
