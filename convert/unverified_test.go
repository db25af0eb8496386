package convert

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// A server that sends no ETag, Last-Modified or commit cannot let a run see
// a file replaced by another of its size: the source is warned about once and
// the manifest lists every such file as unverified.
func TestConvertUnverifiedSource(t *testing.T) {
	t.Parallel()
	h := testckpt.NewHubServer(t, miniSrc)
	up, _ := url.Parse(h.URL)
	proxy := httputil.NewSingleHostReverseProxy(up)
	proxy.ModifyResponse = func(r *http.Response) error {
		r.Header.Del("ETag")
		r.Header.Del("Last-Modified")
		return nil
	}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	var mu sync.Mutex
	var warnings []string
	c, err := safetensors.OpenWith(context.Background(), srv.URL+"/org/name/resolve/main/", safetensors.OpenOptions{
		Env: h.Env,
		Remote: remote.Options{RetryBase: time.Microsecond, RetryMax: time.Millisecond, Warn: func(m string) {
			mu.Lock()
			warnings = append(warnings, m)
			mu.Unlock()
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, _ := Lookup(AttnMoEDenseFP8)
	p, err := NewPlan(c, nil, r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 1}); err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "no ETag, Last-Modified or commit") {
		t.Fatalf("warnings %q, want one", warnings)
	}
	m, err := readManifest(dst)
	if err != nil {
		t.Fatal(err)
	}
	var shards []string
	for _, f := range c.Files {
		shards = append(shards, f.Path)
	}
	slices.Sort(shards)
	if got := slices.Sorted(slices.Values(m.SourceUnverified)); !slices.Equal(got, shards) || len(shards) == 0 {
		t.Fatalf("manifest lists %v as unverified, want every shard %v", got, shards)
	}

	// With ETags (the hub's), nothing is listed and nothing warned.
	warnings = nil
	c2, err := safetensors.OpenWith(context.Background(), h.URL+"/org/name/resolve/main/", safetensors.OpenOptions{
		Env: h.Env, Remote: remote.Options{Warn: func(m string) { warnings = append(warnings, m) }}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	p2, err := NewPlan(c2, nil, r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dst2 := filepath.Join(t.TempDir(), "out2")
	if _, err := Execute(context.Background(), p2, dst2, ExecOptions{Jobs: 1}); err != nil {
		t.Fatal(err)
	}
	if m2, err := readManifest(dst2); err != nil || len(m2.SourceUnverified) != 0 || len(warnings) != 0 {
		t.Fatalf("with ETags: unverified %v, warnings %q (%v)", m2.SourceUnverified, warnings, err)
	}
}
