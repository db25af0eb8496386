// Package objstore reads and writes checkpoints in object storage: s3://
// buckets of AWS S3 or of any S3-compatible store (MinIO, Ceph RGW), and
// gs:// buckets through Google Cloud Storage's S3-compatible XML API with
// HMAC keys, so that one SDK (the AWS SDK for Go v2) serves both.
//
// Credentials, region and endpoint resolve as every AWS tool resolves them
// (config.LoadDefaultConfig); a store reached through a custom endpoint is
// addressed path-style, which MinIO and Ceph need. Requests are signed and
// retried by the SDK's standard retryer; a body cut off midway resumes from
// the next byte.
//
// Reads serve internal/remote's range planning; every read after the first
// is conditional on the object's ETag, so that an object replaced during a
// run fails with remote.ErrChanged naming it.
package objstore
