package safetensors

import (
	"context"
	"fmt"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/objstore"
	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// openObjstore opens an s3:// or gs:// location: a prefix holding the
// checkpoint, an index under it, or one .safetensors object.
func openObjstore(ctx context.Context, raw string, o OpenOptions) (*shards, error) {
	u, err := objstore.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", raw, remoteErr(err))
	}
	dir, name := u, ""
	if strings.HasSuffix(u.Key, ".json") || strings.HasSuffix(u.Key, ".safetensors") {
		i := strings.LastIndexByte(u.Key, '/')
		dir.Key, name = u.Key[:max(i, 0)], u.Key[i+1:]
	}
	b, err := objstore.New(ctx, dir, objstore.Options{Env: o.Env, Connections: o.Connections})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", raw, remoteErr(err))
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s, err := remote.NewStoreSource(sctx, dir.Dir(), b, o.Remote)
	if err != nil {
		stop()
		return nil, fmt.Errorf("open %s: %w", raw, remoteErr(err))
	}
	b.OnRetry(s.Retried)
	return openRemoteSource(ctx, &remoteSource{s: s, stop: stop, listable: true}, raw, dir.Dir(), name)
}
