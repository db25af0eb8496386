package objstore

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// maxPut bounds the objects Put sends in one request (S3 takes up to 5 GiB):
// larger ones go through Create.
const maxPut = 1 << 30

// Put writes object name under the bucket's prefix in one request, complete
// or absent, checked by the store (CRC32C on S3, Content-MD5 on GCS). With
// ifAbsent it creates the object only if no object has its key (If-None-Match:
// *, which AWS S3, GCS and MinIO honour); created is false when one exists.
func (b *Bucket) Put(ctx context.Context, name string, r io.ReadSeeker, size int64, ifAbsent bool) (created bool, err error) {
	_, err = b.putKey(ctx, b.URL.join(name), r, size, ifAbsent)
	if ifAbsent && err != nil && isStatus(err, http.StatusPreconditionFailed, http.StatusConflict) {
		return false, nil
	}
	return err == nil, err
}

func (b *Bucket) putKey(ctx context.Context, key string, r io.ReadSeeker, size int64, ifAbsent bool) (string, error) {
	if size > maxPut {
		return "", b.fail(key, errors.New("over the single-request limit"))
	}
	in := &s3.PutObjectInput{Bucket: &b.URL.Bucket, Key: &key, Body: r, ContentLength: aws.Int64(size)}
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	if b.gs {
		h := md5.New()
		if _, err := io.Copy(h, io.LimitReader(r, size)); err != nil {
			return "", err
		}
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return "", err
		}
		in.ContentMD5 = aws.String(base64.StdEncoding.EncodeToString(h.Sum(nil)))
	} else {
		in.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32c
	}
	out, err := b.c.PutObject(ctx, in)
	if err != nil {
		return "", b.fail(key, err)
	}
	return aws.ToString(out.ETag), nil
}

// isStatus reports whether err, as fail returns it, has one of the codes.
func isStatus(err error, codes ...int) bool {
	var e *remote.Error
	return errors.As(err, &e) && slices.Contains(codes, e.Status)
}

// Delete removes object name under the prefix (no error when absent).
func (b *Bucket) Delete(ctx context.Context, name string) error {
	key := b.URL.join(name)
	if _, err := b.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.URL.Bucket, Key: &key}); err != nil {
		if err := b.fail(key, err); !errors.Is(err, remote.ErrNotFound) {
			return err
		}
	}
	return nil
}

// AbortOwn aborts the unfinished multipart uploads under the prefix whose
// keys are names (a killed run's), leaving other workers' alone. It reports
// how many it aborted.
func (b *Bucket) AbortOwn(ctx context.Context, names []string) (int, error) {
	own := make(map[string]bool, len(names))
	for _, n := range names {
		own[b.URL.join(n)] = true
	}
	return b.abortUnder(ctx, b.URL.join(""), func(k string) bool { return own[k] })
}
