package remote

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestList asks a hub-like API for a repository's files: the request goes to
// /api/models/{repo}/revision/{revision}?blobs=true with the token, and the
// answer's siblings under the source's directory come back with their sizes.
func TestList(t *testing.T) {
	var path, query, auth string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, query, auth = r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization")
		w.Write([]byte(`{"id":"org/name","siblings":[
			{"rfilename":"config.json","size":120},
			{"rfilename":"sub/tokenizer.json","size":7},
			{"rfilename":"model-00001-of-000002.safetensors","size":1000}]}`))
	}))
	defer api.Close()
	env := func(k string) string {
		return map[string]string{"HF_ENDPOINT": api.URL, "HF_TOKEN": "tok", "HOME": t.TempDir()}[k]
	}
	loc, err := Resolve("hf://org/name@refs/pr/3", env)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSourceLoc(t, loc)
	got, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if path != "/api/models/org/name/revision/refs%2Fpr%2F3" || query != "blobs=true" || auth != "Bearer tok" {
		t.Fatalf("asked %s?%s with %q", path, query, auth)
	}
	if len(got) != 3 || got[0] != (RepoFile{"config.json", 120}) || got[1] != (RepoFile{"sub/tokenizer.json", 7}) {
		t.Fatalf("listing %+v", got)
	}
	// A subdirectory reference lists only its own files, named relative to it.
	loc, _ = Resolve("hf://org/name/sub/", env)
	got, err = newTestSourceLoc(t, loc).List(context.Background())
	if err != nil || len(got) != 1 || got[0] != (RepoFile{"tokenizer.json", 7}) {
		t.Fatalf("sub listing %+v, %v", got, err)
	}
	// A plain https:// directory cannot be listed.
	_, err = newTestSource(t, api.URL+"/x/", fastOptions()).List(context.Background())
	if !errors.Is(err, ErrNotListable) {
		t.Fatalf("https listing: %v", err)
	}
}

func newTestSourceLoc(t *testing.T, loc location) *Source {
	t.Helper()
	s, err := NewSource(context.Background(), loc, fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
