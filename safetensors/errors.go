package safetensors

import "errors"

// Sentinel errors, one per class of bad input. Every error the package returns
// wraps one of these with the file (and tensor, where there is one), so callers
// can test the class with errors.Is and still print a message a person can act on.
var (
	// errTooSmall: the file is shorter than the 8-byte header length.
	errTooSmall = errors.New("file shorter than 8 bytes")
	// errHeaderTooLarge: the header length exceeds maxHeaderSize.
	errHeaderTooLarge = errors.New("header length over limit")
	// errHeaderTruncated: the header length points past the end of the file.
	errHeaderTruncated = errors.New("header extends past end of file")
	// errHeaderUTF8: the header is not valid UTF-8.
	errHeaderUTF8 = errors.New("header is not valid UTF-8")
	// errHeaderJSON: the header is not a JSON object of the expected shape.
	errHeaderJSON = errors.New("header is not a valid JSON object")
	// errMetadata: __metadata__ is not a string-to-string object.
	errMetadata = errors.New("__metadata__ must map strings to strings")
	// errDType: an unknown dtype name.
	errDType = errors.New("unknown dtype")
	// errShape: a shape entry that is negative, fractional, or overflows.
	errShape = errors.New("invalid shape")
	// errMissingField: a tensor entry lacks dtype, shape or data_offsets.
	errMissingField = errors.New("tensor entry missing a field")
	// errOffsets: data ranges with holes, overlaps, or out of order.
	errOffsets = errors.New("invalid data offsets")
	// ErrSizeMismatch: a byte range that disagrees with shape × dtype.
	ErrSizeMismatch = errors.New("byte size does not match shape and dtype")
	// errFileSize: the data end does not match the file size (trailing bytes or truncation).
	errFileSize = errors.New("data end does not match file size")
	// errDuplicate: the same tensor name appears twice.
	errDuplicate = errors.New("duplicate tensor name")
	// ErrIndex: an index file that disagrees with its shards or leaves the checkpoint.
	ErrIndex = errors.New("invalid index")
	// ErrNotFound: a tensor or file that is not in the checkpoint.
	ErrNotFound = errors.New("not found")
	// ErrWrite: a writer given bytes that do not match its declared layout.
	ErrWrite = errors.New("write does not match layout")
	// errRemote: an HTTP source that cannot serve byte ranges.
	errRemote = errors.New("remote source error")
)
