package layout

import (
	"errors"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// Sentinel errors; every error of the package wraps one of them.
var (
	// errLayout: a layout definition that is malformed or inconsistent.
	errLayout = errors.New("invalid layout")
	// errPattern: a tensor-name pattern that does not compile.
	errPattern = errors.New("invalid pattern")
	// errUnknownLayout: a layout name that is not built in.
	errUnknownLayout = errors.New("unknown layout")
	// errPartition: a pipeline partition of the wrong length, sum or entries.
	errPartition = errors.New("invalid pipeline partition")
	// errUnmatched: tensors that no rule of the layout matches.
	errUnmatched = errors.New("tensors matched by no rule")
	// errAmbiguous: tensors that more than one rule matches.
	errAmbiguous = errors.New("tensors matched by more than one rule")
	// errIndivisible: a split whose dimension or head count does not divide by its parts.
	errIndivisible = errors.New("split does not divide evenly")
	// errScaleAlign: a split that cuts a 128×128 scale block where the layout forbids it.
	errScaleAlign = errors.New("split cuts a scale block")
	// errRank: a rank or stage number out of range.
	errRank = errors.New("rank out of range")
	// errExpert: an expert index outside the layout's expert count.
	errExpert = errors.New("expert index out of range")
	// errManifest: an export directory whose manifests are missing or inconsistent.
	errManifest = errors.New("invalid export manifest")
	// errPadding: padding a layout drops (e.g. A_log past the valid heads) that is not zero.
	errPadding = errors.New("dropped padding is not zero")
	// errOutputExists: an output directory holding files that are not an
	// unfinished run of the same plan.
	errOutputExists = errors.New("output directory is not empty")
	// errMismatch: a rebuilt tensor whose bytes differ from the source's.
	errMismatch = errors.New("tensor bytes differ")
	// errMetadata: a source file's __metadata__ beyond maxMetadataBytes.
	errMetadata = errors.New("source metadata too large")
	// errLink: a side file or an export's rank file that links where the
	// checkpoint rule does not allow (outside the checkpoint or export, and
	// outside a hub cache snapshot's repository folder), or that was
	// replaced while it was opened.
	errLink = errors.New("link leaves its directory")
	// errChanged: a source file replaced while the run used it
	// (remote.errChanged itself, for local and remote sources alike).
	errChanged = remote.ErrChanged
)
