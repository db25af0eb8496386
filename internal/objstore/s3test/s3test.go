// Package s3test runs a real S3 server (MinIO) on 127.0.0.1 for tests: the
// binary $K3CKPT_MINIO, else minio on PATH, else ~/go/bin/minio (`go install
// github.com/minio/minio@latest`); without one, Start skips the test.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
)

// The server's root credentials, which Start puts in the AWS settings.
const (
	user     = "k3ckpt-test"
	password = "k3ckpt-test-secret"
)

// Server is a running MinIO.
type Server struct {
	Endpoint string     // http://127.0.0.1:PORT
	Client   *s3.Client // with the root credentials, for fixtures
}

// binary finds the MinIO binary ("" when there is none, or when
// K3CKPT_MINIO is "off").
func binary() string {
	if p := os.Getenv("K3CKPT_MINIO"); p == "off" {
		return ""
	} else if p != "" {
		return p
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	if h, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(h, "go", "bin", "minio")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// shared is the test binary's one MinIO, started by the first Start.
var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Start returns the test binary's MinIO, started on first use, with no
// bucket left by an earlier test, and points the process's AWS settings at it
// for the test (so tests using it cannot run in parallel); under -short it
// skips the test. The server dies with the test binary (Pdeathsig, Linux
// only: elsewhere every test starts its own).
func Start(t testing.TB) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("a real MinIO server: skipped under -short (go test without -short runs it)")
	}
	bin := binary()
	if bin == "" {
		t.Skip("no MinIO server (or K3CKPT_MINIO=off): set K3CKPT_MINIO to its binary or install it (go install github.com/minio/minio@latest); .ci/run does with K3CKPT_CI_S3=on")
	}
	if !sharedServer {
		s, stop, err := launch(bin, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		s.env(t)
		return s
	}
	dir := testckpt.Dir(t, "minio", func(string) error { return nil })
	shared.once.Do(func() { shared.srv, _, shared.err = launch(bin, dir) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	s := shared.srv
	if err := s.wipe(); err != nil {
		t.Fatalf("MinIO at %s: remove the buckets of earlier tests: %v", s.Endpoint, err)
	}
	t.Cleanup(func() {
		if err := s.wipe(); err != nil {
			t.Errorf("MinIO at %s: remove the test's buckets: %v", s.Endpoint, err)
		}
	})
	s.env(t)
	return s
}

// launch starts MinIO with its data under dir and waits until it serves;
// stop kills it.
func launch(bin, dir string) (srv *Server, stop func(), err error) {
	addr, err := freeAddr()
	console, err2 := freeAddr()
	if err = errors.Join(err, err2); err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", console, filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+user, "MINIO_ROOT_PASSWORD="+password,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1",
		"HOME="+dir, // its config and certs directory (~/.minio)
	)
	dieWithParent(cmd)
	log, err := os.Create(filepath.Join(dir, "minio.log"))
	if err != nil {
		return nil, nil, err
	}
	defer log.Close() // the child keeps its own descriptor
	logged := func() string { b, _ := os.ReadFile(log.Name()); return string(b) }
	cmd.Stdout, cmd.Stderr = log, log
	started := make(chan error, 1)
	exited := make(chan struct{})
	// Pdeathsig fires when the thread that started the child exits: the
	// goroutine keeps its thread, alive until the child ends.
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start %s: %v", bin, err)
			return
		}
		started <- nil
		cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, nil, err
	}
	stop = func() {
		cmd.Process.Kill()
		<-exited
	}
	s := &Server{Endpoint: "http://" + addr, Client: s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String("http://" + addr), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(user, password, ""),
	})}
	// Serving, not only ready: under load MinIO answers 503
	// XMinioServerNotInitialized for a while after /minio/health/ready does.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := s.Client.ListBuckets(context.Background(), &s3.ListBucketsInput{},
			func(o *s3.Options) { o.RetryMaxAttempts = 1 })
		if err == nil {
			return s, stop, nil
		}
		select {
		case <-exited:
			return nil, nil, fmt.Errorf("MinIO at %s exited: %v\n%s", addr, err, logged())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("MinIO at %s not serving after 60 s: %v\n%s", addr, err, logged())
		}
	}
}

// wipe removes every bucket, with its objects and unfinished uploads.
func (s *Server) wipe() error {
	ctx := context.Background()
	out, err := s.Client.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil {
		return err
	}
	for _, b := range out.Buckets {
		pg := s3.NewListObjectsV2Paginator(s.Client, &s3.ListObjectsV2Input{Bucket: b.Name})
		for pg.HasMorePages() {
			page, err := pg.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, o := range page.Contents {
				if _, err := s.Client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: b.Name, Key: o.Key}); err != nil {
					return err
				}
			}
		}
		ups, err := s.Client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: b.Name})
		if err != nil {
			return err
		}
		for _, u := range ups.Uploads {
			if _, err := s.Client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: b.Name, Key: u.Key, UploadId: u.UploadId}); err != nil {
				return err
			}
		}
		if _, err := s.Client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: b.Name}); err != nil {
			return err
		}
	}
	return nil
}

// env points every AWS setting at the server with the root credentials, and
// hides the user's own AWS configuration and the instance metadata service.
func (s *Server) env(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", user)
	t.Setenv("AWS_SECRET_ACCESS_KEY", password)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", s.Endpoint)
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Bucket makes a bucket.
func (s *Server) Bucket(t testing.TB, name string) {
	t.Helper()
	if _, err := s.Client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
}

// PutDir uploads every regular file of dir (recursively) under
// bucket/prefix, keyed by its slash-separated relative path.
func (s *Server) PutDir(t testing.TB, dir, bucket, prefix string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return s.Put(bucket, path.Join(prefix, filepath.ToSlash(rel)), f)
	})
	if err != nil {
		t.Fatalf("upload %s: %v", dir, err)
	}
}

// Put writes one object.
func (s *Server) Put(bucket, key string, r io.ReadSeeker) error {
	_, err := s.Client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: r})
	return err
}

// GetDir downloads every object under bucket/prefix into dir, keyed by the
// rest of its key, and returns the keys. An object listed and gone before
// its GET (a killed client's request still reaching the server) is left out.
func (s *Server) GetDir(t testing.TB, bucket, prefix, dir string) []string {
	t.Helper()
	ctx := context.Background()
	p := prefix
	if p != "" {
		p += "/"
	}
	var keys []string
	pg := s3.NewListObjectsV2Paginator(s.Client, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &p})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatalf("list %s/%s: %v", bucket, prefix, err)
		}
		for _, o := range page.Contents {
			out, err := s.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: o.Key})
			var gone *types.NoSuchKey
			if errors.As(err, &gone) {
				continue
			}
			k := strings.TrimPrefix(*o.Key, p)
			if err == nil {
				err = writeFile(filepath.Join(dir, filepath.FromSlash(k)), out.Body)
				out.Body.Close()
			}
			if err != nil {
				t.Fatalf("get %s/%s: %v", bucket, *o.Key, err)
			}
			keys = append(keys, k)
		}
	}
	return keys
}

// writeFile writes r to path, making its folder.
func writeFile(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}
