package remote

import (
	"fmt"
	"path"
	"strings"
	"unicode"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

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
