// Package objstore reads and writes checkpoints in object storage: s3://
// buckets of AWS S3 or of any S3-compatible store (MinIO, Ceph RGW), and
// gs:// buckets through Google Cloud Storage's S3-compatible XML API with
// HMAC keys, so that one SDK (the AWS SDK for Go v2) serves both.
//
// Credentials, region and endpoint resolve as for every AWS tool; a custom
// endpoint is addressed path-style, as MinIO and Ceph need. The SDK signs and
// retries requests; a body cut off midway resumes from the next byte.
//
// Reads serve internal/remote's range planning; every read after the first
// is conditional on the object's ETag, so that an object replaced during a
// run fails with remote.ErrChanged naming it.
package objstore
