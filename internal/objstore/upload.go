package objstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// defaultPartSize is the default size of an upload's parts (S3 wants at
// least 5 MiB for every part but the last; 10,000 parts of 8 MiB make 78 GiB,
// more than any checkpoint shard).
const defaultPartSize = 8 << 20

// partSizeEnv sets another part size in bytes, within S3's limits: for a
// store that wants larger parts, huge objects, or tests of several parts.
const partSizeEnv = "K3CKPT_S3_PART_SIZE"

// partSizeOf parses partSizeEnv's value ("": defaultPartSize).
func partSizeOf(v string) (int, error) {
	if v == "" {
		return defaultPartSize, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 5<<20 || n > 5<<30 {
		return 0, fmt.Errorf("%s=%q: want a part size in bytes from %d (5 MiB) to %d (5 GiB)", partSizeEnv, v, 5<<20, int64(5<<30))
	}
	return int(n), nil
}

// partsInFlight bounds the parts of one upload sent while the next fills: the
// parallelism comes from uploading several files at once.
const partsInFlight = 1

// upload is one object being written as a multipart upload: parts go up
// while the next fills, each checked by the store (CRC32C on S3, Content-MD5
// on GCS, which verifies only that), and the object appears under its key
// only when Commit completes the upload. It implements filewrite's sink.
type upload struct {
	b      *Bucket
	key    string
	id     string // the multipart upload's, once begun
	ctx    context.Context
	cancel context.CancelFunc

	buf    []byte        // the part being filled (nil: none yet)
	size   int64         // bytes taken so far
	next   int32         // the next part's number
	flight chan struct{} // one token per part being sent

	wg    sync.WaitGroup
	mu    sync.Mutex
	parts []types.CompletedPart
	err   error
	done  bool // committed or aborted

	committed func(etag string) // hears the object's ETag once committed (nil: none)

	cleaned  chan struct{} // closed once the key's unfinished uploads are aborted
	cleanErr error
}

// partBuffer takes a free part buffer of the bucket, or makes one; putBuffer
// keeps one for the next part, up to maxFreeParts.
func (b *Bucket) partBuffer() []byte {
	select {
	case buf := <-b.free:
		return buf[:0]
	default:
		return make([]byte, 0, b.partSize)
	}
}

func (b *Bucket) putBuffer(buf []byte) {
	select {
	case b.free <- buf:
	default:
	}
}

// Create starts writing object name under the bucket's prefix, first
// aborting the key's unfinished uploads (a killed run's) while the first part
// fills. An object of one part goes up in one PUT on Commit, a larger one as
// a multipart upload. ctx bounds its requests; committed, if not nil, hears
// the object's ETag once Commit succeeds.
func (b *Bucket) Create(ctx context.Context, name string, committed func(etag string)) *upload {
	key := b.URL.join(name)
	ctx, cancel := context.WithCancel(ctx)
	u := &upload{b: b, key: key, ctx: ctx, cancel: cancel, next: 1, committed: committed,
		flight: make(chan struct{}, partsInFlight), cleaned: make(chan struct{})}
	go func() {
		defer close(u.cleaned)
		_, u.cleanErr = b.abortUnder(ctx, key, func(k string) bool { return k == key })
	}()
	return u
}

// start begins the multipart upload once the key's unfinished uploads are
// aborted (else the clean-up could abort this one).
func (u *upload) start() error {
	<-u.cleaned
	if u.cleanErr != nil {
		return u.cleanErr
	}
	in := &s3.CreateMultipartUploadInput{Bucket: &u.b.URL.Bucket, Key: &u.key}
	if !u.b.gs {
		in.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32c
	}
	out, err := u.b.c.CreateMultipartUpload(u.ctx, in)
	if err != nil {
		return u.b.fail(u.key, err)
	}
	u.id = aws.ToString(out.UploadId)
	return nil
}

// WriteAt implements filewrite.Sink: p follows the bytes taken so far.
func (u *upload) WriteAt(p []byte, off int64) (int, error) {
	if off != u.size {
		return 0, fmt.Errorf("upload %s: write at %d, after %d bytes", u.b.addr(u.key), off, u.size)
	}
	n := 0
	for n < len(p) {
		if err := u.failed(); err != nil {
			return n, err
		}
		if u.buf == nil {
			u.buf = u.b.partBuffer()
		}
		c := copy(u.buf[len(u.buf):cap(u.buf)], p[n:])
		u.buf = u.buf[:len(u.buf)+c]
		n += c
		u.size += int64(c)
		if len(u.buf) == cap(u.buf) {
			u.send()
		}
	}
	return n, nil
}

func (u *upload) failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

// send uploads the filled part on a goroutine of its own, once fewer than
// partsInFlight are being sent.
func (u *upload) send() {
	buf, num := u.buf, u.next
	u.buf = nil
	u.next++
	if u.id == "" {
		if err := u.start(); err != nil {
			u.mu.Lock()
			if u.err == nil {
				u.err = err
				u.cancel()
			}
			u.mu.Unlock()
			u.b.putBuffer(buf)
			return
		}
	}
	select {
	case u.flight <- struct{}{}:
	case <-u.ctx.Done():
		u.b.putBuffer(buf)
		return
	}
	u.wg.Go(func() {
		defer func() { <-u.flight; u.b.putBuffer(buf) }()
		in := &s3.UploadPartInput{Bucket: &u.b.URL.Bucket, Key: &u.key, UploadId: &u.id, PartNumber: &num, Body: bytes.NewReader(buf)}
		if u.b.gs {
			sum := md5.Sum(buf)
			in.ContentMD5 = aws.String(base64.StdEncoding.EncodeToString(sum[:]))
		} else {
			in.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32c
		}
		out, err := u.b.c.UploadPart(u.ctx, in)
		u.mu.Lock()
		defer u.mu.Unlock()
		if err != nil {
			if u.err == nil {
				u.err = fmt.Errorf("part %d: %w", num, u.b.fail(u.key, err))
				u.cancel()
			}
			return
		}
		u.parts = append(u.parts, types.CompletedPart{PartNumber: &num, ETag: out.ETag, ChecksumCRC32C: out.ChecksumCRC32C})
	})
}

// Commit implements filewrite.Sink: the last part goes up, then the upload
// is completed; on failure it is aborted.
func (u *upload) Commit() error {
	if u.next == 1 { // no part sent: the object fits in one PUT
		return u.commitOne()
	}
	if u.buf != nil {
		u.send()
	}
	u.wg.Wait()
	if err := u.failed(); err != nil {
		u.Abort()
		return err
	}
	slices.SortFunc(u.parts, func(a, b types.CompletedPart) int { return int(*a.PartNumber - *b.PartNumber) })
	out, err := u.b.c.CompleteMultipartUpload(u.ctx, &s3.CompleteMultipartUploadInput{Bucket: &u.b.URL.Bucket, Key: &u.key, UploadId: &u.id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: u.parts}})
	if err != nil {
		err = u.b.fail(u.key, err)
		u.Abort()
		return err
	}
	u.done = true
	u.cancel()
	u.commit(aws.ToString(out.ETag))
	return nil
}

func (u *upload) commit(etag string) {
	if u.committed != nil {
		u.committed(etag)
	}
}

// commitOne writes an object of at most one part in one PUT.
func (u *upload) commitOne() error {
	<-u.cleaned
	err := u.cleanErr
	etag := ""
	if err == nil {
		etag, err = u.b.putKey(u.ctx, u.key, bytes.NewReader(u.buf), int64(len(u.buf)), false)
	}
	if u.buf != nil {
		u.b.putBuffer(u.buf)
		u.buf = nil
	}
	u.done = true
	u.cancel()
	if err == nil {
		u.commit(etag)
	}
	return err
}

// Abort implements filewrite.Sink: the parts sent are discarded and the key
// is left as it was. After Commit it does nothing.
func (u *upload) Abort() error {
	if u.done {
		return nil
	}
	u.done = true
	if u.buf != nil {
		u.b.putBuffer(u.buf)
		u.buf = nil
	}
	u.cancel()
	u.wg.Wait()
	<-u.cleaned
	if u.id == "" {
		return nil // nothing was sent
	}
	_, err := u.b.c.AbortMultipartUpload(context.WithoutCancel(u.ctx), &s3.AbortMultipartUploadInput{Bucket: &u.b.URL.Bucket, Key: &u.key, UploadId: &u.id})
	if err != nil {
		return u.b.fail(u.key, err)
	}
	return nil
}

// abortUnder aborts the unfinished uploads whose key starts with prefix
// and is one of those own accepts.
func (b *Bucket) abortUnder(ctx context.Context, prefix string, own func(key string) bool) (int, error) {
	n := 0
	p := s3.NewListMultipartUploadsPaginator(b.c, &s3.ListMultipartUploadsInput{Bucket: &b.URL.Bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return n, b.fail(prefix, err)
		}
		for _, up := range page.Uploads {
			if !own(aws.ToString(up.Key)) {
				continue
			}
			if _, err := b.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &b.URL.Bucket, Key: up.Key, UploadId: up.UploadId}); err != nil && !hasCode(err, "NoSuchUpload") {
				return n, b.fail(aws.ToString(up.Key), err)
			}
			n++
		}
	}
	return n, nil
}

// Stat reports an object's size and ETag, or ok false when there is none.
func (b *Bucket) Stat(ctx context.Context, name string) (size int64, etag string, ok bool, err error) {
	key := b.URL.join(name)
	h, err := b.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.URL.Bucket, Key: &key})
	if err != nil {
		if err = b.fail(key, err); errors.Is(err, remote.ErrNotFound) {
			return 0, "", false, nil
		}
		return 0, "", false, err
	}
	return aws.ToInt64(h.ContentLength), aws.ToString(h.ETag), true, nil
}
