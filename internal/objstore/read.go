package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// maxListed bounds a listing: a checkpoint prefix holds hundreds of objects.
const maxListed = 100000

// Get implements remote.Store: a ranged GET of the object name under the
// bucket's prefix, conditional on etag when given; a body cut off midway is
// asked again from the next byte, up to the retryer's attempts.
func (b *Bucket) Get(ctx context.Context, name, etag string, p []byte, off int64, received func(int64)) (int, int64, string, error) {
	key := b.URL.join(name)
	want, got, size := int64(len(p)), int64(0), int64(-1)
	if want == 0 {
		return 0, 0, etag, nil
	}
	for attempt := 1; ; attempt++ {
		in := &s3.GetObjectInput{Bucket: &b.URL.Bucket, Key: &key,
			Range: aws.String(fmt.Sprintf("bytes=%d-%d", off+got, off+want-1))}
		if etag != "" {
			in.IfMatch = aws.String(etag)
		}
		out, err := b.c.GetObject(ctx, in)
		if err != nil {
			if off == 0 && got == 0 && etag == "" && hasCode(err, "InvalidRange") {
				return b.empty(ctx, key)
			}
			return int(got), 0, "", b.fail(key, err)
		}
		total, cerr := rangeTotal(aws.ToString(out.ContentRange))
		if cerr != nil {
			out.Body.Close()
			return int(got), 0, "", &remote.Error{File: b.addr(key), Host: b.host, Kind: remote.ErrProtocol,
				Detail: fmt.Sprintf("Content-Range %q: %v", aws.ToString(out.ContentRange), cerr)}
		}
		if size < 0 {
			size = total
			want = min(want, max(size-off, 0))
		}
		if etag == "" {
			etag = aws.ToString(out.ETag) // a resumed body must be the same object
		}
		n, rerr := b.readBody(ctx, out.Body, p[got:want], received)
		out.Body.Close()
		got += int64(n)
		if rerr == nil {
			return int(got), size, etag, nil
		}
		if err := b.retryBody(ctx, key, attempt, rerr, fmt.Sprintf("body cut off after %d of %d bytes at offset %d: %v", got, want, off, rerr)); err != nil {
			return int(got), size, etag, err
		}
	}
}

// retryBody follows a body that failed on attempt: it fails, with detail,
// once the retryer gives up, else waits its delay and returns nil.
func (b *Bucket) retryBody(ctx context.Context, key string, attempt int, err error, detail string) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	wait, derr := b.retryer.RetryDelay(attempt, err)
	if attempt >= b.retryer.MaxAttempts() || derr != nil {
		return &remote.Error{File: b.addr(key), Host: b.host, Kind: remote.ErrNetwork, Attempts: attempt, Detail: detail}
	}
	b.retried(attempt, wait, err)
	select {
	case <-time.After(wait):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// readBody fills p from body; a body that sends nothing for the stall
// timeout is closed (and the read retried by the caller).
func (b *Bucket) readBody(ctx context.Context, body io.ReadCloser, p []byte, received func(int64)) (int, error) {
	t := time.AfterFunc(stallTimeout, func() { body.Close() })
	defer t.Stop()
	n := 0
	for n < len(p) {
		m, err := body.Read(p[n:])
		if m > 0 {
			n += m
			received(int64(m))
			t.Reset(stallTimeout)
		}
		if err == io.EOF && n < len(p) {
			return n, io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			return n, err
		}
	}
	return n, nil
}

// empty answers the probe of an object with no bytes (no satisfiable range).
func (b *Bucket) empty(ctx context.Context, key string) (int, int64, string, error) {
	h, err := b.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.URL.Bucket, Key: &key})
	if err != nil {
		return 0, 0, "", b.fail(key, err)
	}
	return 0, aws.ToInt64(h.ContentLength), aws.ToString(h.ETag), nil
}

// hasCode reports whether err is the store's answer with that error code.
func hasCode(err error, code string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}

// rangeTotal reads the object size from "bytes first-last/total".
func rangeTotal(cr string) (int64, error) {
	_, tot, ok := strings.Cut(cr, "/")
	if !ok || !strings.HasPrefix(cr, "bytes ") {
		return 0, errors.New("not a bytes range with a total")
	}
	n, err := strconv.ParseInt(tot, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("unreadable total size")
	}
	return n, nil
}

// ReadAll implements remote.Store: a whole small object.
func (b *Bucket) ReadAll(ctx context.Context, name string, limit int64) ([]byte, error) {
	key := b.URL.join(name)
	for attempt := 1; ; attempt++ {
		out, err := b.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.URL.Bucket, Key: &key})
		if err != nil {
			return nil, b.fail(key, err)
		}
		if n := aws.ToInt64(out.ContentLength); n > limit {
			out.Body.Close()
			return nil, &remote.Error{File: b.addr(key), Host: b.host, Kind: remote.ErrProtocol,
				Detail: fmt.Sprintf("%d bytes is over the %d-byte limit", n, limit)}
		}
		buf := make([]byte, aws.ToInt64(out.ContentLength))
		n, rerr := b.readBody(ctx, out.Body, buf, func(int64) {})
		out.Body.Close()
		if rerr == nil {
			return buf[:n], nil
		}
		if err := b.retryBody(ctx, key, attempt, rerr, rerr.Error()); err != nil {
			return nil, err
		}
	}
}

// List implements remote.Store: every object under the prefix, subfolders
// included, with their sizes.
func (b *Bucket) List(ctx context.Context) ([]remote.RepoFile, error) {
	prefix := b.URL.join("")
	pg := s3.NewListObjectsV2Paginator(b.c, &s3.ListObjectsV2Input{Bucket: &b.URL.Bucket, Prefix: &prefix})
	var out []remote.RepoFile
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, b.fail(prefix, err)
		}
		for _, o := range page.Contents {
			name := strings.TrimPrefix(aws.ToString(o.Key), prefix)
			if name != "" {
				out = append(out, remote.RepoFile{Name: name, Size: aws.ToInt64(o.Size)})
			}
		}
		if len(out) > maxListed {
			return nil, &remote.Error{File: b.URL.Dir(), Host: b.host, Kind: remote.ErrSource,
				Detail: fmt.Sprintf("more than %d objects under the prefix: not a checkpoint", maxListed)}
		}
	}
	return out, nil
}
