package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// addr is the full address of key, scheme://bucket/key: what errors name.
func (b *Bucket) addr(key string) string { return b.URL.Scheme + "://" + b.URL.Bucket + "/" + key }

// fail turns an SDK error for key into a *remote.Error naming the object's
// address, what is wrong and what to do. Context errors pass unchanged.
func (b *Bucket) fail(key string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	e := &remote.Error{File: b.addr(key), Host: b.host}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		e.Status = re.HTTPStatusCode()
	}
	code, msg := "", err.Error()
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code, msg = ae.ErrorCode(), ae.ErrorMessage()
		if msg == "" {
			msg = code
		}
	}
	creds := "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE and ~/.aws/credentials)"
	if b.gs {
		creds = "check the HMAC key in GS_ACCESS_KEY_ID / GS_SECRET_ACCESS_KEY"
	}
	switch {
	case code == "NoSuchBucket":
		// Not ErrNotFound: a missing bucket is no missing optional file.
		e.Kind, e.Detail = remote.ErrSource, fmt.Sprintf("bucket %q does not exist", b.URL.Bucket)
	case code == "NoSuchKey" || code == "NotFound" || e.Status == http.StatusNotFound:
		e.Kind, e.Detail = remote.ErrNotFound, fmt.Sprintf("no object %q in bucket %q", key, b.URL.Bucket)
	case code == "PreconditionFailed" || e.Status == http.StatusPreconditionFailed:
		e.Kind, e.Detail = remote.ErrChanged, "the object was replaced (its ETag changed) since it was first read; run again once it is stable"
	case code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "AccessDenied" ||
		code == "ExpiredToken" || code == "InvalidToken" || e.Status == http.StatusForbidden || e.Status == http.StatusUnauthorized:
		e.Kind, e.Detail = remote.ErrAuth, fmt.Sprintf("bucket %q: %s (%s); %s", b.URL.Bucket, msg, code, creds)
	case code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" && e.Status == http.StatusBadRequest:
		e.Kind, e.Detail = remote.ErrSource, fmt.Sprintf("bucket %q is in another region: set AWS_REGION to its region (%s)", b.URL.Bucket, msg)
	case isCredentialsError(err):
		e.Kind, e.Detail = remote.ErrAuth, fmt.Sprintf("no credentials for bucket %q: %s", b.URL.Bucket, creds)
	case e.Status != 0:
		e.Kind, e.Detail = remote.ErrStatus, fmt.Sprintf("%s (%s)", msg, code)
	default:
		e.Kind, e.Detail = remote.ErrNetwork, err.Error()
	}
	return e
}

// isCredentialsError reports a failure of the credential chain, which the
// SDK gives no type of its own.
func isCredentialsError(err error) bool {
	m := err.Error()
	return strings.Contains(m, "failed to retrieve credentials") || strings.Contains(m, "failed to refresh cached credentials")
}
