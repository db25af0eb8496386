package layout

import (
	"errors"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// Sentinel errors; every error of the package wraps one of them.
var (
	errLayout        = errors.New("invalid layout")
	errPattern       = errors.New("invalid pattern")
	errUnknownLayout = errors.New("unknown layout")
	errPartition     = errors.New("invalid pipeline partition")
	errUnmatched     = errors.New("tensors matched by no rule")
	errAmbiguous     = errors.New("tensors matched by more than one rule")
	errIndivisible   = errors.New("split does not divide evenly")
	errScaleAlign    = errors.New("split cuts a scale block")
	errRank          = errors.New("rank out of range")
	errExpert        = errors.New("expert index out of range")
	errManifest      = errors.New("invalid export manifest")
	errPadding       = errors.New("dropped padding is not zero")
	// errOutputExists: an output directory holding files that are not an
	// unfinished run of the same plan.
	errOutputExists = errors.New("output directory is not empty")
	errMismatch     = errors.New("tensor bytes differ")
	errMetadata     = errors.New("source metadata too large")
	// errLink: a side file or rank file that links outside what the
	// checkpoint rule allows (fsx.Root), or was replaced while opened.
	errLink = errors.New("link leaves its directory")
	// errChanged: a source file replaced while the run used it.
	errChanged = remote.ErrChanged
)
