package layout

import (
	"errors"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// Sentinel errors; every error of the package wraps one of them.
var (
	// ErrLayout: a layout definition that is malformed or inconsistent.
	ErrLayout = errors.New("invalid layout")
	// ErrPattern: a tensor-name pattern that does not compile.
	ErrPattern = errors.New("invalid pattern")
	// ErrUnknownLayout: a layout name that is not built in.
	ErrUnknownLayout = errors.New("unknown layout")
	// ErrPartition: a pipeline partition of the wrong length, sum or entries.
	ErrPartition = errors.New("invalid pipeline partition")
	// ErrUnmatched: tensors that no rule of the layout matches.
	ErrUnmatched = errors.New("tensors matched by no rule")
	// ErrAmbiguous: tensors that more than one rule matches.
	ErrAmbiguous = errors.New("tensors matched by more than one rule")
	// ErrIndivisible: a split whose dimension or head count does not divide by its parts.
	ErrIndivisible = errors.New("split does not divide evenly")
	// ErrScaleAlign: a split that cuts a 128×128 scale block where the layout forbids it.
	ErrScaleAlign = errors.New("split cuts a scale block")
	// ErrRank: a rank or stage number out of range.
	ErrRank = errors.New("rank out of range")
	// ErrExpert: an expert index outside the layout's expert count.
	ErrExpert = errors.New("expert index out of range")
	// ErrManifest: an export directory whose manifests are missing or inconsistent.
	ErrManifest = errors.New("invalid export manifest")
	// ErrPadding: padding a layout drops (e.g. A_log past the valid heads) that is not zero.
	ErrPadding = errors.New("dropped padding is not zero")
	// ErrOutputExists: an output directory holding files that are not an
	// unfinished run of the same plan.
	ErrOutputExists = errors.New("output directory is not empty")
	// ErrMismatch: a rebuilt tensor whose bytes differ from the source's.
	ErrMismatch = errors.New("tensor bytes differ")
	// ErrMetadata: a source file's __metadata__ beyond maxMetadataBytes.
	ErrMetadata = errors.New("source metadata too large")
	// ErrLink: a side file or an export's rank file that links where the
	// checkpoint rule does not allow (outside the checkpoint or export, and
	// outside a hub cache snapshot's repository folder), or that was
	// replaced while it was opened.
	ErrLink = errors.New("link leaves its directory")
	// ErrChanged: a source file replaced while the run used it
	// (remote.ErrChanged itself, for local and remote sources alike).
	ErrChanged = remote.ErrChanged
)
