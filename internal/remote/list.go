package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// maxListing bounds the hub's answer to a file listing.
const maxListing = 16 << 20

// RepoFile is one file of a listed repository: its slash-separated path
// relative to the source's base, and its size.
type RepoFile struct {
	Name string
	Size int64
}

// ErrNotListable: the source is a plain https:// directory, which HTTP gives
// no way to list.
var ErrNotListable = fmt.Errorf("%w: an https:// directory cannot be listed (hf:// repositories can)", ErrSource)

// List names the files under the source's base directory, with their sizes,
// the way huggingface_hub's model_info does: one request to the hub's API,
// {endpoint}/api/models/{repo}/revision/{revision}?blobs=true. A store lists
// its own objects; any other source fails with ErrNotListable.
func (s *Source) List(ctx context.Context) ([]RepoFile, error) {
	if s.store != nil {
		return s.store.List(ctx)
	}
	if s.loc.Repo == "" {
		return nil, ErrNotListable
	}
	marker := "/" + s.loc.Repo + "/resolve/" + urlQuote(s.loc.Revision, false) + "/"
	i := strings.Index(s.loc.Base, marker)
	if i < 0 {
		return nil, &Error{Kind: ErrSource, Detail: fmt.Sprintf("base %s is not a hub resolve URL", s.loc.Base)}
	}
	endpoint, dir := s.loc.Base[:i], s.loc.Base[i+len(marker):]
	if d, err := url.PathUnescape(dir); err == nil {
		dir = d
	}
	api := endpoint + "/api/models/" + s.loc.Repo + "/revision/" + urlQuote(s.loc.Revision, false) + "?blobs=true"
	b, err := s.readURL(ctx, "(file listing)", api, maxListing)
	if err != nil {
		return nil, err
	}
	var info struct {
		Siblings []struct {
			RFilename string `json:"rfilename"`
			Size      *int64 `json:"size"`
		} `json:"siblings"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, &Error{Kind: ErrProtocol, Detail: fmt.Sprintf("file listing of %s: %v", s.loc.Repo, err)}
	}
	var out []RepoFile
	for _, f := range info.Siblings {
		name, ok := strings.CutPrefix(f.RFilename, dir)
		if !ok || name == "" {
			continue
		}
		if err := checkListedName(s.loc.Repo, name); err != nil {
			return nil, err
		}
		if f.Size == nil || *f.Size < 0 {
			return nil, &Error{Kind: ErrProtocol, Detail: fmt.Sprintf("file listing of %s: no size for %s", s.loc.Repo, f.RFilename)}
		}
		out = append(out, RepoFile{Name: name, Size: *f.Size})
	}
	return out, nil
}

// checkListedName refuses a name from a hub listing that is not a clean,
// relative, slash-separated path inside the repository ("/config.json"
// would be written over DST's own): the hub lists only clean names, so
// anything else is a broken or hostile server.
func checkListedName(repo, name string) error {
	bad := ""
	switch {
	case strings.HasPrefix(name, "/"):
		bad = "an absolute path"
	case strings.ContainsRune(name, '\\'):
		bad = "a backslash"
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) >= 0:
		bad = "a control character"
	case path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../"):
		bad = `an unclean path ("." or ".." elements, doubled or trailing slashes)`
	default:
		return nil
	}
	return &Error{Kind: ErrProtocol, Detail: fmt.Sprintf("file listing of %s names %s, %s: no file is read or written under that name", repo, termtext.Name(name), bad)}
}
