package convert

import (
	"errors"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// Sentinel errors, one per class of problem, always wrapped with the file or
// tensor they concern so that callers can test them with errors.Is.
var (
	errUnknownRecipe = errors.New("unknown recipe")
	// errUnknownFormat: a convention, scale format or policy name that is not known.
	errUnknownFormat  = errors.New("unknown format")
	errNotQuantizable = errors.New("tensor cannot be block-quantized")
	// errNameCollision: two output tensors would get the same name (e.g. a
	// source holding X.weight_scale_inv for a weight the recipe quantizes).
	errNameCollision  = errors.New("output tensor name collision")
	errConfigMismatch = errors.New("tensor disagrees with config.json")
	// errConfig: a config.json or quantization config that cannot be read or rewritten.
	errConfig    = errors.New("invalid config")
	errNonFinite = errors.New("non-finite value in a weight to quantize")
	errSameDir   = errors.New("source and destination are the same directory")
	// ErrDestination: the destination cannot receive this conversion (it holds
	// other files or overlaps the source; the message says which).
	ErrDestination = errors.New("destination refused")
	// ErrIncomplete: merge was asked to finish a conversion with units still missing.
	ErrIncomplete = errors.New("conversion incomplete")
	// ErrWorker: an invalid --worker I/N.
	ErrWorker = errors.New("invalid worker slice")
	// errChanged: a source file no longer matches what was planned from it
	// (remote.ErrChanged itself, for local and remote sources alike).
	errChanged = remote.ErrChanged
)
