package objstore

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// URL is a parsed s3:// or gs:// location.
type URL struct {
	Scheme string // "s3" or "gs"
	Bucket string
	Key    string // the object key or key prefix, without a leading or trailing '/'
}

// IsURL reports whether raw is an s3:// or gs:// location.
func IsURL(raw string) bool {
	return strings.HasPrefix(raw, "s3://") || strings.HasPrefix(raw, "gs://")
}

// bucketRE is S3's bucket naming rule (also GCS's, for names without dots).
var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// Parse reads s3://bucket[/key] or gs://bucket[/key].
func Parse(raw string) (URL, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || (scheme != "s3" && scheme != "gs") {
		return URL{}, &remote.Error{Kind: remote.ErrSource, Detail: fmt.Sprintf("%q is not an s3:// or gs:// location", raw)}
	}
	bucket, key, _ := strings.Cut(rest, "/")
	if !bucketRE.MatchString(bucket) || strings.Contains(bucket, "..") {
		return URL{}, &remote.Error{Kind: remote.ErrSource, Detail: fmt.Sprintf("%q: %q is not a bucket name (3 to 63 lowercase letters, digits, '-' and '.')", raw, bucket)}
	}
	key = strings.Trim(key, "/")
	for _, part := range strings.Split(key, "/") {
		if key != "" && (part == "" || part == "." || part == "..") {
			return URL{}, &remote.Error{Kind: remote.ErrSource, Detail: fmt.Sprintf("%q: key %q has an empty, '.' or '..' component", raw, key)}
		}
	}
	return URL{Scheme: scheme, Bucket: bucket, Key: key}, nil
}

// String is the location as written: scheme://bucket/key.
func (u URL) String() string {
	if u.Key == "" {
		return u.Scheme + "://" + u.Bucket
	}
	return u.Scheme + "://" + u.Bucket + "/" + u.Key
}

// Dir is the location as a directory: its String with a trailing '/'.
func (u URL) Dir() string { return u.String() + "/" }

// join is the key of name under u's key as a prefix ("" for the prefix
// itself, with its trailing '/').
func (u URL) join(name string) string {
	if u.Key == "" {
		return name
	}
	return u.Key + "/" + name
}
