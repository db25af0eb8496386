package remote

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// The URLs are what huggingface_hub's hf_hub_url builds: ENDPOINT +
// /{repo_id}/resolve/{quote(revision, safe="")}/{quote(filename)}; its own
// documented example is julien-c/EsperBERTo-small → .../resolve/main/pytorch_model.bin.
func TestResolveHF(t *testing.T) {
	home := t.TempDir()
	cases := []struct {
		raw, endpoint   string
		base, name, rev string
	}{
		{"hf://julien-c/EsperBERTo-small/pytorch_model.bin", "",
			"https://huggingface.co/julien-c/EsperBERTo-small/resolve/main/", "pytorch_model.bin", "main"},
		{"hf://moonshotai/Kimi-K3", "", "https://huggingface.co/moonshotai/Kimi-K3/resolve/main/", "", "main"},
		{"hf://moonshotai/Kimi-K3@v1.0/", "", "https://huggingface.co/moonshotai/Kimi-K3/resolve/v1.0/", "", "v1.0"},
		{"hf://org/name@refs/pr/12/model.safetensors.index.json", "https://mirror.example/",
			"https://mirror.example/org/name/resolve/refs%2Fpr%2F12/", "model.safetensors.index.json", "refs/pr/12"},
		{"hf://org/name@refs%2Fpr%2F12", "", "https://huggingface.co/org/name/resolve/refs%2Fpr%2F12/", "", "refs/pr/12"},
		{"hf://org/name@feat+x/sub dir/a b.json", "", "https://huggingface.co/org/name/resolve/feat%2Bx/sub%20dir/", "a b.json", "feat+x"},
		{"hf://org/name@0123456789abcdef0123456789abcdef01234567", "",
			"https://huggingface.co/org/name/resolve/0123456789abcdef0123456789abcdef01234567/", "", "0123456789abcdef0123456789abcdef01234567"},
	}
	for _, c := range cases {
		loc, err := Resolve(c.raw, mapEnv(map[string]string{"HOME": home, "HF_ENDPOINT": c.endpoint}))
		if err != nil {
			t.Errorf("%s: %v", c.raw, err)
			continue
		}
		if loc.Base != c.base || loc.Name != c.name || loc.Revision != c.rev || loc.Token != "" {
			t.Errorf("%s: got base %q name %q rev %q token %q, want %q %q %q", c.raw, loc.Base, loc.Name, loc.Revision, loc.Token, c.base, c.name, c.rev)
		}
	}
	for _, bad := range []string{"hf://", "hf://org", "hf://org/", "hf://datasets/org/name", "hf://org/na--me",
		"hf://-org/name", "hf://org/name@", "hf://org/name/../x", "hf://org/na me"} {
		if _, err := Resolve(bad, mapEnv(map[string]string{"HOME": home})); !errors.Is(err, ErrSource) {
			t.Errorf("%s: got %v, want ErrSource", bad, err)
		}
	}
	if _, err := Resolve("hf://org/name", mapEnv(map[string]string{"HOME": home, "HF_ENDPOINT": "ftp://x"})); !errors.Is(err, ErrSource) {
		t.Errorf("ftp endpoint: %v", err)
	}
}

func TestResolveHTTP(t *testing.T) {
	env := mapEnv(map[string]string{"HOME": t.TempDir(), "HF_TOKEN": "tok"})
	loc, err := Resolve("https://mirror.example/k3/model.safetensors.index.json?x=1", env)
	if err != nil || loc.Base != "https://mirror.example/k3/" || loc.Name != "model.safetensors.index.json" || loc.Token != "" {
		t.Fatalf("got %+v, %v", loc, err)
	}
	// The token goes to the hub's own origin, also by an https:// URL.
	loc, err = Resolve("https://HuggingFace.co:443/org/name/resolve/main/", env)
	if err != nil || loc.Token != "tok" || loc.TokenHost != "https://huggingface.co" || loc.Name != "" {
		t.Fatalf("got %+v, %v", loc, err)
	}
	for _, bad := range []string{"ftp://x/y/", "https:///y/", "https://user:pw@host/y/", "/local/dir"} {
		if _, err := Resolve(bad, env); !errors.Is(err, ErrSource) {
			t.Errorf("%s: got %v, want ErrSource", bad, err)
		}
	}
	if !IsRemote("hf://a/b") || !IsRemote("https://x/") || IsRemote("/data/k3") {
		t.Error("IsRemote")
	}
}

// Token precedence as huggingface_hub's get_token: HF_TOKEN, then
// HUGGING_FACE_HUB_TOKEN, then the file at HF_TOKEN_PATH, whose default is
// $HF_HOME/token, HF_HOME defaulting to $XDG_CACHE_HOME/huggingface, then
// ~/.cache/huggingface.
func TestTokenSources(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) string {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	homeTok := write(filepath.Join(dir, "home", ".cache", "huggingface", "token"), "from-home\n")
	write(filepath.Join(dir, "xdg", "huggingface", "token"), "from-xdg")
	write(filepath.Join(dir, "hfhome", "token"), "  from-hfhome \r\n")
	explicit := write(filepath.Join(dir, "elsewhere"), "from-path")
	base := map[string]string{"HOME": filepath.Join(dir, "home")}
	with := func(kv ...string) func(string) string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return mapEnv(m)
	}
	cases := []struct {
		env  func(string) string
		want string
	}{
		{with(), "from-home"},
		{with("XDG_CACHE_HOME", filepath.Join(dir, "xdg")), "from-xdg"},
		{with("XDG_CACHE_HOME", filepath.Join(dir, "xdg"), "HF_HOME", filepath.Join(dir, "hfhome")), "from-hfhome"},
		{with("HF_HOME", filepath.Join(dir, "hfhome"), "HF_TOKEN_PATH", explicit), "from-path"},
		{with("HF_TOKEN_PATH", "~/.cache/huggingface/token"), "from-home"},
		{with("HF_TOKEN_PATH", explicit, "HUGGING_FACE_HUB_TOKEN", "legacy"), "legacy"},
		{with("HF_TOKEN_PATH", explicit, "HUGGING_FACE_HUB_TOKEN", "legacy", "HF_TOKEN", " env\n"), "env"},
		{with("HF_TOKEN", "env", "HF_HUB_DISABLE_IMPLICIT_TOKEN", "1"), ""},
		{with("HF_TOKEN_PATH", filepath.Join(dir, "missing")), ""},
	}
	for i, c := range cases {
		loc, err := Resolve("hf://org/name", c.env)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if loc.Token != c.want {
			t.Errorf("case %d: token %q, want %q", i, loc.Token, c.want)
		}
		if c.want != "" && loc.TokenHost != "https://huggingface.co" {
			t.Errorf("case %d: token host %q", i, loc.TokenHost)
		}
	}
	_ = homeTok
	// A token path that is not a regular file is refused, not read.
	if _, err := Resolve("hf://org/name", with("HF_TOKEN_PATH", dir)); !errors.Is(err, ErrSource) {
		t.Errorf("directory as token file: %v", err)
	}
}

// HF_HUB_OFFLINE resolves to the cached snapshot, as huggingface_hub's cache
// layout has it: models--org--name/refs/{revision} holds the commit, whose
// files are in snapshots/{commit}/.
func TestResolveOffline(t *testing.T) {
	cache := t.TempDir()
	commit := "0123456789abcdef0123456789abcdef01234567"
	repo := filepath.Join(cache, "models--org--name")
	if err := os.MkdirAll(filepath.Join(repo, "snapshots", commit, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644)
	env := mapEnv(map[string]string{"HOME": t.TempDir(), "HF_HUB_OFFLINE": "yes", "HF_HUB_CACHE": cache})
	loc, err := Resolve("hf://org/name/sub/x.json", env)
	if err != nil || loc.LocalDir != filepath.Join(repo, "snapshots", commit, "sub") || loc.Name != "x.json" || loc.Base != "" {
		t.Fatalf("got %+v, %v", loc, err)
	}
	if loc, err = Resolve("hf://org/name@"+commit, env); err != nil || loc.LocalDir != filepath.Join(repo, "snapshots", commit) {
		t.Fatalf("by commit: %+v, %v", loc, err)
	}
	for _, raw := range []string{"hf://org/name@v2", "hf://org/other"} {
		if _, err := Resolve(raw, env); !errors.Is(err, errOffline) {
			t.Errorf("%s: got %v, want ErrOffline", raw, err)
		}
	}
	// TRANSFORMERS_OFFLINE counts too; HF_HUB_CACHE falls back to $HF_HOME/hub.
	env = mapEnv(map[string]string{"TRANSFORMERS_OFFLINE": "1", "HF_HOME": filepath.Dir(cache), "HOME": t.TempDir()})
	if _, err := Resolve("hf://org/name", env); !errors.Is(err, errOffline) {
		t.Errorf("TRANSFORMERS_OFFLINE: %v", err)
	}
}

func TestQuote(t *testing.T) {
	// urllib.parse.quote("a b/c+d~e@f", safe="") and with the default safe="/".
	if got := urlQuote("a b/c+d~e@f", false); got != "a%20b%2Fc%2Bd~e%40f" {
		t.Error(got)
	}
	if got := urlQuote("a b/c+d~e@f", true); got != "a%20b/c%2Bd~e%40f" {
		t.Error(got)
	}
}
