package remote

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A listing naming a file outside the repository's clean relative names
// (absolute, "..", unclean, a backslash, a control character) is refused
// as a whole, naming the entry, before any caller writes under it.
func TestListRefusesUncleanNames(t *testing.T) {
	for _, name := range []string{"/config.json", "../config.json", "sub/../../x", "a//b.json", "./config.json", `sub\x.json`, "a\nb.json"} {
		js := strings.ReplaceAll(strings.ReplaceAll(name, `\`, `\\`), "\n", `\n`)
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"siblings":[{"rfilename":"config.json","size":1},{"rfilename":"` + js + `","size":1}]}`))
		}))
		env := func(k string) string {
			return map[string]string{"HF_ENDPOINT": api.URL, "HOME": t.TempDir()}[k]
		}
		loc, err := Resolve("hf://org/name", env)
		if err != nil {
			t.Fatal(err)
		}
		_, err = newTestSourceLoc(t, loc).List(context.Background())
		if !errors.Is(err, ErrProtocol) || strings.ContainsRune(err.Error(), '\n') {
			t.Errorf("listing %q: %v", name, err)
		}
		api.Close()
	}
}
