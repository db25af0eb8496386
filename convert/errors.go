package convert

import (
	"errors"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// Sentinel errors, one per class of problem, always wrapped with the file or
// tensor they concern so that callers can test them with errors.Is.
var (
	// ErrUnknownRecipe: no recipe by that name.
	ErrUnknownRecipe = errors.New("unknown recipe")
	// ErrUnknownFormat: a convention, scale format or policy name that is not known.
	ErrUnknownFormat = errors.New("unknown format")
	// ErrNotQuantizable: the recipe quantizes a tensor whose dtype or rank
	// cannot be block-quantized.
	ErrNotQuantizable = errors.New("tensor cannot be block-quantized")
	// ErrNameCollision: two output tensors would get the same name (for
	// example a source that already holds X.weight_scale_inv for a weight the
	// recipe quantizes).
	ErrNameCollision = errors.New("output tensor name collision")
	// ErrConfigMismatch: a tensor whose shape or dtype disagrees with config.json.
	ErrConfigMismatch = errors.New("tensor disagrees with config.json")
	// ErrConfig: a config.json or quantization config that cannot be read or rewritten.
	ErrConfig = errors.New("invalid config")
	// ErrNonFinite: a NaN or infinity in a weight the recipe quantizes.
	ErrNonFinite = errors.New("non-finite value in a weight to quantize")
	// ErrSameDir: source and destination are the same directory.
	ErrSameDir = errors.New("source and destination are the same directory")
	// ErrDestination: the destination cannot receive this conversion (it
	// holds another conversion or other files, or overlaps the source); the
	// message says which.
	ErrDestination = errors.New("destination refused")
	// ErrIncomplete: merge was asked to finish a conversion with units still missing.
	ErrIncomplete = errors.New("conversion incomplete")
	// ErrWorker: an invalid --worker I/N.
	ErrWorker = errors.New("invalid worker slice")
	// ErrChanged: a source file no longer matches what was planned from it
	// (remote.ErrChanged itself, for local and remote sources alike).
	ErrChanged = remote.ErrChanged
	// ErrVerify: verify found a violation.
	ErrVerify = errors.New("verification failed")
)
