package safetensors

import "errors"

// Sentinel errors, one per class of bad input. Every error the package returns
// wraps one of these with the file (and tensor, where there is one), so callers
// can test the class with errors.Is and still print a message a person can act on.
var (
	// ErrTooSmall: the file is shorter than the 8-byte header length.
	ErrTooSmall = errors.New("file shorter than 8 bytes")
	// ErrHeaderTooLarge: the header length exceeds MaxHeaderSize.
	ErrHeaderTooLarge = errors.New("header length over limit")
	// ErrHeaderTruncated: the header length points past the end of the file.
	ErrHeaderTruncated = errors.New("header extends past end of file")
	// ErrHeaderUTF8: the header is not valid UTF-8.
	ErrHeaderUTF8 = errors.New("header is not valid UTF-8")
	// ErrHeaderJSON: the header is not a JSON object of the expected shape.
	ErrHeaderJSON = errors.New("header is not a valid JSON object")
	// ErrMetadata: __metadata__ is not a string-to-string object.
	ErrMetadata = errors.New("__metadata__ must map strings to strings")
	// ErrDType: an unknown dtype name.
	ErrDType = errors.New("unknown dtype")
	// ErrShape: a shape entry that is negative, fractional, or overflows.
	ErrShape = errors.New("invalid shape")
	// ErrMissingField: a tensor entry lacks dtype, shape or data_offsets.
	ErrMissingField = errors.New("tensor entry missing a field")
	// ErrOffsets: data ranges with holes, overlaps, or out of order.
	ErrOffsets = errors.New("invalid data offsets")
	// ErrSizeMismatch: a byte range that disagrees with shape × dtype.
	ErrSizeMismatch = errors.New("byte size does not match shape and dtype")
	// ErrFileSize: the data end does not match the file size (trailing bytes or truncation).
	ErrFileSize = errors.New("data end does not match file size")
	// ErrDuplicate: the same tensor name appears twice.
	ErrDuplicate = errors.New("duplicate tensor name")
	// ErrIndex: an index file that disagrees with its shards or leaves the checkpoint.
	ErrIndex = errors.New("invalid index")
	// ErrNotFound: a tensor or file that is not in the checkpoint.
	ErrNotFound = errors.New("not found")
	// ErrWrite: a writer given bytes that do not match its declared layout.
	ErrWrite = errors.New("write does not match layout")
	// ErrRemote: an HTTP source that cannot serve byte ranges.
	ErrRemote = errors.New("remote source error")
)
