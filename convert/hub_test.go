package convert

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

// plainConversions caches the CLI's conversion of tinySrc (plain files) per
// flag set, the reference a download layout's conversion must equal.
var (
	plainMu          sync.Mutex
	plainConversions = map[string]*plainEntry{}
)

type plainEntry struct {
	once   sync.Once
	dst    string
	stderr string
	code   int
}

func plainConversion(t *testing.T, flags ...string) string {
	t.Helper()
	key := strings.Join(flags, " ")
	plainMu.Lock()
	e := plainConversions[key]
	if e == nil {
		e = &plainEntry{dst: filepath.Join(testRoot, "plain-cli-"+strings.NewReplacer(" ", "_", "-", "").Replace(key))}
		plainConversions[key] = e
	}
	plainMu.Unlock()
	e.once.Do(func() {
		e.code = -1 // stays so if runCLI stops the test
		_, e.stderr, e.code = runCLI(t, append([]string{"convert", tinySrc(t), e.dst, "-q"}, flags...)...)
	})
	if e.code != 0 {
		t.Fatalf("convert %s (plain files): exit %d: %s", key, e.code, e.stderr)
	}
	return e.dst
}

// inspectJSON runs inspect --json with flags and returns its report without
// the source path (the one field that names where the checkpoint lies).
func inspectJSON(t *testing.T, src string, flags ...string) map[string]any {
	t.Helper()
	stdout, stderr, code := runCLI(t, append([]string{"inspect", src, "--json"}, flags...)...)
	var m map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &m) != nil {
		t.Fatalf("inspect %s %v: exit %d: %s %.300s", src, flags, code, stderr, stdout)
	}
	if m["source"] != src {
		t.Errorf("inspect %v: source %v, want %s", flags, m["source"], src)
	}
	delete(m, "source")
	return m
}

// convertFlags are the two conversions a download layout is checked with:
// the CLI's defaults and NVIDIA's recipe with NVFP4 experts and ModelOpt's
// FP8 numerics.
var convertFlags = [][]string{
	nil,
	{"--recipe", ModelOptK3, "--experts", "nvfp4", "--numerics", "modelopt"},
}

// A Hugging Face cache snapshot (every entry a link into ../../blobs/) is read
// as it is: inspect (plain, --strict, --recipe) reports what it reports for
// the same files in a plain folder; convert, with the default flags and with
// modelopt-k3/nvfp4/modelopt numerics, writes byte for byte the plain
// folder's conversion (the manifest records no source path, so nothing is
// excluded), and verify passes it. A side file linked out of the repository
// folder makes convert refuse, naming the file and what is allowed.
func TestConvertHubCacheSnapshot(t *testing.T) {
	t.Parallel()
	buildCLI(t) // before building the cache: skipped under -short
	// HubCache hard-links its source: a private copy, never the shared tinySrc.
	own := filepath.Join(t.TempDir(), "src")
	testckpt.CopyTree(t, tinySrc(t), own)
	snap, repo := testckpt.HubCache(t, own)
	if fi, err := os.Lstat(filepath.Join(snap, model.ConfigName)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("snapshot's config.json is not a link: %v", err)
	}

	for _, flags := range [][]string{nil, {"--strict"}, {"--recipe", ModelOptK3}, {"--recipe", AttnMoEDenseFP8, "--format", "deepseek"}} {
		got, want := inspectJSON(t, snap, flags...), inspectJSON(t, tinySrc(t), flags...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("inspect %v of the snapshot differs from the plain folder's", flags)
		}
	}
	if _, stderr, code := runCLI(t, "inspect", snap, "--strict"); code != 0 || strings.Contains(strings.ToLower(stderr), "warn") {
		t.Errorf("inspect --strict of the snapshot: exit %d: %s", code, stderr)
	}

	for _, flags := range convertFlags {
		dst := filepath.Join(t.TempDir(), "out")
		if _, stderr, code := runCLI(t, append([]string{"convert", snap, dst, "-q"}, flags...)...); code != 0 {
			t.Fatalf("convert %v of the snapshot: exit %d: %s", flags, code, stderr)
		}
		for _, side := range []string{"tokenizer_config.json", "tiktoken.model", "code/modeling_kimi_k3.py"} {
			fi, err := os.Lstat(filepath.Join(dst, side))
			if err != nil || !fi.Mode().IsRegular() {
				t.Errorf("convert %v: %s is not a regular file in the output: %v", flags, side, err)
			}
		}
		sameTree(t, dst, plainConversion(t, flags...))
		stdout, stderr, code := runCLI(t, "verify", snap, dst, "--json")
		var rep VerifyReport
		if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || !rep.OK || len(rep.Tensors) == 0 {
			t.Errorf("verify %v of the snapshot's conversion: exit %d: %s %.300s", flags, code, stderr, stdout)
		}
	}

	// A side file linked out of the repository folder is refused.
	outside := filepath.Join(filepath.Dir(filepath.Dir(repo)), "secret.json")
	if err := os.WriteFile(outside, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(snap, "special_tokens_map.json")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "refused")
	_, stderr, code := runCLI(t, "convert", snap, dst)
	if code == 0 || !strings.Contains(stderr, "special_tokens_map.json") || !strings.Contains(stderr, "outside") || !strings.Contains(stderr, repo) {
		t.Errorf("side file linked out of the repository folder: exit %d: %s (want a refusal naming the file and the folder links may point into)", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dst, model.ConfigName)); err == nil {
		t.Error("refused conversion wrote config.json")
	}
}

// A `hf download --local-dir` tree (real files plus .cache/huggingface/ with
// the download's bookkeeping) converts to exactly what the same files without
// .cache convert to: nothing of .cache reaches the output.
func TestConvertLocalDirDownload(t *testing.T) {
	t.Parallel()
	buildCLI(t) // before building the tree: skipped under -short
	dir := filepath.Join(t.TempDir(), "Kimi-K3")
	testckpt.CopyTree(t, tinySrc(t), dir)
	meta := filepath.Join(dir, ".cache", "huggingface", "download")
	if err := os.MkdirAll(filepath.Join(meta, "code"), 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			for _, ext := range []string{".metadata", ".lock"} {
				if err := os.WriteFile(filepath.Join(meta, e.Name()+ext), []byte("0123abcd\nsha\n1700000000.0\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for name, body := range map[string]string{"code/modeling_kimi_k3.py.metadata": "0123abcd\n", "../.gitignore": "*\n"} {
		if err := os.WriteFile(filepath.Join(meta, filepath.FromSlash(name)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, flags := range convertFlags {
		dst := filepath.Join(t.TempDir(), "out")
		if _, stderr, code := runCLI(t, append([]string{"convert", dir, dst, "-q"}, flags...)...); code != 0 {
			t.Fatalf("convert %v of the --local-dir download: exit %d: %s", flags, code, stderr)
		}
		if _, err := os.Lstat(filepath.Join(dst, ".cache")); !os.IsNotExist(err) {
			t.Errorf("convert %v copied .cache into the output (%v)", flags, err)
		}
		sameTree(t, dst, plainConversion(t, flags...))
	}
}
