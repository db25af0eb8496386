package remote

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

const (
	defaultEndpoint = "https://huggingface.co" // when HF_ENDPOINT is unset
	defaultRevision = "main"
	maxTokenFile    = 64 << 10 // a real token is under 100 bytes
)

// location is where a checkpoint lives once resolved.
type location struct {
	// Base is the directory URL, ending in '/', of path-escaped file names;
	// empty when LocalDir, an offline hf:// reference's snapshot, is set.
	Base, LocalDir string
	// Name is the file the reference pointed at ("" for a directory).
	Name string
	// Token is the bearer token for TokenHost, the origin
	// (scheme://host[:port]) allowed to receive it.
	Token, TokenHost string
	// Repo and Revision are the hub repository and revision (hf:// only).
	Repo, Revision string
}

// IsRemote reports whether raw names a remote source (hf://, http://,
// https://, or an object store's s3:// or gs://, which Resolve leaves to
// internal/objstore).
func IsRemote(raw string) bool {
	scheme, _, ok := strings.Cut(raw, "://")
	return ok && slices.Contains([]string{"hf", "http", "https", "s3", "gs"}, scheme)
}

// hub is the part of huggingface_hub's configuration a resolution needs.
type hub struct {
	endpoint string // without trailing '/'
	origin   string
	token    string
	offline  bool
	cache    string // HF_HUB_CACHE
}

func hubConfig(env func(string) string) (hub, error) {
	h := hub{endpoint: cmp.Or(strings.TrimRight(env("HF_ENDPOINT"), "/"), defaultEndpoint)}
	u, err := url.Parse(h.endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return h, &Error{Kind: ErrSource, Detail: fmt.Sprintf("HF_ENDPOINT %q is not an http(s) URL", h.endpoint)}
	}
	h.origin = originOf(u)
	h.offline = isTrue(env("HF_HUB_OFFLINE")) || isTrue(env("TRANSFORMERS_OFFLINE"))
	home := expandPath(env("HF_HOME"), env)
	if home == "" {
		home = filepath.Join(cmp.Or(env("XDG_CACHE_HOME"), filepath.Join(homeDir(env), ".cache")), "huggingface")
	}
	h.cache = cmp.Or(expandPath(env("HF_HUB_CACHE"), env), expandPath(env("HUGGINGFACE_HUB_CACHE"), env), filepath.Join(home, "hub"))
	// huggingface_hub sends no token at all, not even HF_TOKEN, when implicit
	// tokens are disabled.
	if isTrue(env("HF_HUB_DISABLE_IMPLICIT_TOKEN")) {
		return h, nil
	}
	h.token = cmp.Or(cleanToken(env("HF_TOKEN")), cleanToken(env("HUGGING_FACE_HUB_TOKEN")))
	if h.token == "" {
		h.token, err = readToken(cmp.Or(expandPath(env("HF_TOKEN_PATH"), env), filepath.Join(home, "token")))
	}
	return h, err
}

// isTrue is huggingface_hub's reading of a boolean variable.
func isTrue(v string) bool {
	switch strings.ToUpper(v) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// cleanToken drops line breaks and surrounding blanks, as huggingface_hub does.
func cleanToken(s string) string {
	return strings.TrimSpace(strings.NewReplacer("\r", "", "\n", "").Replace(s))
}

// readToken reads the token file; a missing file means no token. Anything but
// a small regular file is refused rather than read (a FIFO would block, a
// device would never end).
func readToken(path string) (string, error) {
	b, err := fsx.ReadFile(path, maxTokenFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", &Error{Kind: ErrSource, Detail: "token file: " + err.Error()}
	}
	return cleanToken(string(b)), nil
}

func homeDir(env func(string) string) string {
	if h := env("HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

// expandPath expands a leading ~ and $VAR / ${VAR} like Python's
// expanduser(expandvars(...)); unknown variables are left as written.
func expandPath(p string, env func(string) string) string {
	if p == "" {
		return ""
	}
	p = os.Expand(p, func(k string) string {
		if v := env(k); v != "" {
			return v
		}
		return "${" + k + "}"
	})
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = homeDir(env) + p[1:]
	}
	return p
}

var (
	// repoPart is one component of a repository id (huggingface_hub's rules).
	repoPart = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$`)
	commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// Resolve turns raw into a location: an http(s):// URL to a directory (ending
// in '/') or to a file in one, or hf://org/name[@revision][/path] resolved as
// huggingface_hub does: HF_ENDPOINT + /org/name/resolve/{revision}/{path}.
// The token (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, or the file HF_TOKEN_PATH,
// default $HF_HOME/token) goes to the endpoint's origin only, also for an
// https:// URL there. With HF_HUB_OFFLINE set, hf:// resolves to the cached
// snapshot directory instead or fails with errOffline. env looks up those
// variables (nil: os.Getenv).
func Resolve(raw string, env func(key string) string) (location, error) {
	if env == nil {
		env = os.Getenv
	}
	h, err := hubConfig(env)
	if err != nil {
		return location{}, err
	}
	if rest, ok := strings.CutPrefix(raw, "hf://"); ok {
		return h.resolveHF(raw, rest)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return location{}, &Error{Kind: ErrSource, Detail: fmt.Sprintf("%q is not an http(s):// or hf:// location", raw)}
	}
	if u.User != nil {
		return location{}, &Error{Kind: ErrSource, Detail: fmt.Sprintf("%s: credentials in the URL are not supported (use HF_TOKEN)", u.Redacted())}
	}
	u.RawQuery, u.Fragment = "", ""
	s := u.String()
	loc := location{Base: s}
	if !strings.HasSuffix(u.Path, "/") {
		i := strings.LastIndex(s, "/")
		loc.Base, loc.Name = s[:i+1], u.Path[strings.LastIndex(u.Path, "/")+1:]
	}
	if originOf(u) == h.origin && h.token != "" {
		loc.Token, loc.TokenHost = h.token, h.origin
	}
	return loc, nil
}

func (h hub) resolveHF(raw, rest string) (location, error) {
	bad := func(why string) (location, error) {
		return location{}, &Error{Kind: ErrSource, Detail: fmt.Sprintf("%s: %s (want hf://org/name[@revision][/path])", raw, why)}
	}
	org, rest, _ := strings.Cut(rest, "/")
	name, path, _ := strings.Cut(rest, "/")
	if org == "" || name == "" {
		return bad("no org/name")
	}
	switch org {
	case "datasets", "spaces", "models":
		return bad("only model repositories are supported, named without a type prefix")
	}
	rev := defaultRevision
	if i := strings.IndexByte(name, '@'); i >= 0 {
		name, rev = name[:i], name[i+1:]
		// refs/pr/N and refs/convert/X contain '/'; otherwise the first '/'
		// ends the revision. A quoted one (refs%2Fpr%2F1) is unquoted.
		if kind, after, ok := strings.Cut(path, "/"); rev == "refs" && ok {
			n, p, _ := strings.Cut(after, "/")
			rev, path = "refs/"+kind+"/"+n, p
		}
		if u, err := url.PathUnescape(rev); err == nil {
			rev = u
		}
		if rev == "" {
			return bad("empty revision")
		}
	}
	for _, p := range []string{org, name} {
		if len(p) > 96 || !repoPart.MatchString(p) || strings.Contains(p, "--") || strings.Contains(p, "..") {
			return bad(fmt.Sprintf("%q is not a valid repository name part", p))
		}
	}
	if segs := strings.Split(path, "/"); slices.Contains(segs, ".") || slices.Contains(segs, "..") {
		return bad("the path may not contain . or ..")
	}
	repo := org + "/" + name
	dir, file := "", path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		dir, file = path[:i+1], path[i+1:]
	}
	loc := location{Name: file, Repo: repo, Revision: rev}
	if h.offline {
		snap, err := h.snapshot(repo, rev)
		if err != nil {
			return location{}, err
		}
		loc.LocalDir = filepath.Join(snap, filepath.FromSlash(dir))
		return loc, nil
	}
	loc.Base = h.endpoint + "/" + repo + "/resolve/" + urlQuote(rev, false) + "/" + urlQuote(dir, true)
	if h.token != "" {
		loc.Token, loc.TokenHost = h.token, h.origin
	}
	return loc, nil
}

// snapshot finds the cached snapshot of repo at rev: refs/{rev} names the
// commit of a branch or tag; a commit hash names its snapshot directly.
func (h hub) snapshot(repo, rev string) (string, error) {
	dir := filepath.Join(h.cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	commit := rev
	if b, err := os.ReadFile(filepath.Join(dir, "refs", filepath.FromSlash(rev))); err == nil {
		commit = strings.TrimSpace(string(b))
	}
	snap := filepath.Join(dir, "snapshots", commit)
	if !commitRE.MatchString(commit) {
		return "", &Error{Kind: errOffline, Detail: fmt.Sprintf("hf://%s@%s is not in the cache %s", repo, rev, dir)}
	}
	if st, err := os.Stat(snap); err != nil || !st.IsDir() {
		return "", &Error{Kind: errOffline, Detail: fmt.Sprintf("hf://%s@%s: no snapshot %s", repo, rev, snap)}
	}
	return snap, nil
}

// urlQuote percent-escapes everything but unreserved characters (and '/' when
// keepSlash), like Python's urllib.parse.quote with safe="" or "/".
func urlQuote(s string, keepSlash bool) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '/' && keepSlash:
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// originOf is scheme://host[:port] with the host lowercased and a default
// port dropped, so that equal origins compare equal as strings.
func originOf(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return strings.ToLower(u.Scheme) + "://" + host
}
