package convert

import (
	"errors"
	"fmt"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// TestErrChangedIsRemote: a source that changed is one error whether a local
// check or the remote reader found it, so errors.Is on either matches both.
func TestErrChangedIsRemote(t *testing.T) {
	t.Parallel()
	local := fmt.Errorf("%w: file x was modified", errChanged)
	server := &remote.Error{File: "x", Kind: remote.ErrChanged}
	if !errors.Is(local, remote.ErrChanged) || !errors.Is(server, errChanged) {
		t.Errorf("errors.Is: local vs remote.ErrChanged %v, remote vs ErrChanged %v", errors.Is(local, remote.ErrChanged), errors.Is(server, errChanged))
	}
}
