package safetensors

import "errors"

// Sentinel errors, one per class of bad input. Every error the package returns
// wraps one of these with the file (and tensor, where there is one), so callers
// can test the class with errors.Is and still print a message a person can act on.
var (
	errTooSmall        = errors.New("file shorter than 8 bytes")
	errHeaderTooLarge  = errors.New("header length over limit") // maxHeaderSize
	errHeaderTruncated = errors.New("header extends past end of file")
	errHeaderUTF8      = errors.New("header is not valid UTF-8")
	errHeaderJSON      = errors.New("header is not a valid JSON object")
	errMetadata        = errors.New("__metadata__ must map strings to strings")
	errDType           = errors.New("unknown dtype")
	errShape           = errors.New("invalid shape")
	errMissingField    = errors.New("tensor entry missing a field")
	errOffsets         = errors.New("invalid data offsets")
	errFileSize        = errors.New("data end does not match file size")
	errDuplicate       = errors.New("duplicate tensor name")
	errRemote          = errors.New("remote source error")

	// ErrSizeMismatch: a byte range that disagrees with shape × dtype.
	ErrSizeMismatch = errors.New("byte size does not match shape and dtype")
	// ErrIndex: an index file that disagrees with its shards or leaves the checkpoint.
	ErrIndex = errors.New("invalid index")
	// ErrNotFound: a tensor or file that is not in the checkpoint.
	ErrNotFound = errors.New("not found")
	// ErrWrite: a writer given bytes that do not match its declared layout.
	ErrWrite = errors.New("write does not match layout")
)
