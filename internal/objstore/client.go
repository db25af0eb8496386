package objstore

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

const (
	// gCSEndpoint is Google Cloud Storage's XML API, which speaks S3 to HMAC keys.
	gCSEndpoint = "https://storage.googleapis.com"
	// maxAttempts is how many times the SDK tries one request.
	maxAttempts = 8
	// stallTimeout fails an attempt whose body sends nothing for this long.
	stallTimeout = 60 * time.Second
)

// Options tune a Bucket. The zero value is ready to use.
type Options struct {
	// Connections is how many requests run at once (0: 64, more than any
	// fetch of the commands opens by default).
	Connections int
	// Env looks up GS_ENDPOINT_URL, GS_ACCESS_KEY_ID, GS_SECRET_ACCESS_KEY
	// and partSizeEnv (nil: os.Getenv); the SDK reads the AWS settings itself.
	Env func(key string) string
}

// Bucket is a client for the objects under one s3:// or gs:// location.
// It is safe for concurrent use.
type Bucket struct {
	URL URL // the location the client was made for

	c       *s3.Client
	host    string // the endpoint's host, named in errors
	gs      bool
	retryer aws.RetryerV2
	onRetry func(remote.RetryEvent) // set once, before the first request

	partSize int         // see defaultPartSize and partSizeEnv
	free     chan []byte // part buffers kept for the next uploads (see maxFreeParts)
}

// maxFreeParts bounds the part buffers a bucket keeps for reuse: left to the
// collector, the heap grew with the objects' size.
const maxFreeParts = 128

// New makes a client for u. Credentials and region resolve lazily: a
// missing or refused credential is reported by the first request, naming
// the bucket and key.
func New(ctx context.Context, u URL, o Options) (*Bucket, error) {
	o.Connections = cmp.Or(max(o.Connections, 0), 64)
	env := o.Env
	if env == nil {
		env = os.Getenv
	}
	ps, err := partSizeOf(env(partSizeEnv))
	if err != nil {
		return nil, &remote.Error{File: u.String(), Kind: remote.ErrSource, Detail: err.Error()}
	}
	b := &Bucket{URL: u, gs: u.Scheme == "gs", partSize: ps, free: make(chan []byte, maxFreeParts)}
	b.retryer = retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts = maxAttempts
		// No shared retry budget: a long throttle must not fail every other request.
		so.RateLimiter = ratelimit.None
	})
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		// Every request goes to one host: idle room for each keeps connections open.
		t.MaxIdleConns = 4 * o.Connections
		t.MaxIdleConnsPerHost = 2 * o.Connections
		t.DisableCompression = true
	})
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(hc),
		config.WithRetryer(func() aws.Retryer { return countingRetryer{b.retryer, b} }),
	}
	if b.gs {
		if id, secret := env("GS_ACCESS_KEY_ID"), env("GS_SECRET_ACCESS_KEY"); id != "" && secret != "" {
			opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(id, secret, "")))
		}
		opts = append(opts, config.WithRegion("auto"))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, &remote.Error{File: u.String(), Kind: remote.ErrSource, Detail: "AWS configuration: " + err.Error()}
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1" // S3's default region; S3-compatible stores accept it
	}
	b.c = s3.NewFromConfig(cfg, func(so *s3.Options) {
		if b.gs {
			so.BaseEndpoint = aws.String(cmp.Or(env("GS_ENDPOINT_URL"), gCSEndpoint))
			// GCS verifies Content-MD5, not S3's x-amz-checksum headers.
			so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
		if so.BaseEndpoint != nil {
			// MinIO, Ceph RGW and the like serve buckets under the path.
			so.UsePathStyle = true
			if pu, err := url.Parse(*so.BaseEndpoint); err == nil {
				b.host = pu.Host
			}
		}
		// Ranged reads carry no whole-object checksum to validate.
		so.DisableLogOutputChecksumValidationSkipped = true
	})
	if b.host == "" {
		b.host = fmt.Sprintf("s3.%s.amazonaws.com", cfg.Region)
	}
	return b, nil
}

// OnRetry sets what hears each retry of the SDK (a Source's Retried); call
// it before the first request.
func (b *Bucket) OnRetry(f func(remote.RetryEvent)) { b.onRetry = f }

// countingRetryer is the standard retryer that also reports each retry.
type countingRetryer struct {
	aws.RetryerV2
	b *Bucket
}

func (r countingRetryer) RetryDelay(attempt int, err error) (time.Duration, error) {
	d, derr := r.RetryerV2.RetryDelay(attempt, err)
	if derr == nil {
		r.b.retried(attempt, d, err)
	}
	return d, derr
}

func (b *Bucket) retried(attempt int, wait time.Duration, err error) {
	if b.onRetry != nil {
		b.onRetry(remote.RetryEvent{File: b.URL.String(), Attempt: attempt, Wait: wait, Err: err})
	}
}
