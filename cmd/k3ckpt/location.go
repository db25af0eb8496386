package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// schemeRE matches a location written scheme://… (RFC 3986 scheme syntax).
var schemeRE = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// role is what a positional argument is to its command: read or written,
// and the schemes it takes besides local paths. Any other scheme:// is an
// error, never a local path (a DST "s3://b/x" must not become ./s3:/b/x).
type role struct {
	verb    string
	schemes []string
}

// The roles: a checkpoint read, a directory read locally (an export's or a
// conversion's), a local output, and an output that may be an object store.
var (
	roleSrc    = role{"read from", []string{"hf", "http", "https", "s3", "gs"}}
	roleLocal  = role{"read from", nil}
	roleDst    = role{"write to", nil}
	roleBucket = role{"write to", []string{"s3", "gs"}}
)

// argRoles gives each command's positional arguments their roles; the last
// one repeats. A command not listed (one added later) reads every argument.
var argRoles = map[string][]role{
	"convert":    {roleSrc, roleBucket},
	"shard":      {roleSrc, roleBucket},
	"export":     {roleSrc, roleBucket},
	"reassemble": {roleLocal, roleBucket},
	"merge":      {roleBucket},
	"synth":      {roleDst},
	"verify":     {roleSrc, roleBucket},
}

// checkLocations wraps every subcommand's argument check: a wrong count says
// how the command is called (cobra's does not), and an unsupported scheme://
// in an argument or reassemble --check fails before anything runs.
func checkLocations(root *cobra.Command) {
	for _, c := range root.Commands() {
		roles := argRoles[c.Name()]
		inner := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error {
			if inner != nil {
				if err := inner(cmd, args); err != nil {
					return fmt.Errorf("%s: %w\nusage: %s (%s --help for more)", cmd.Name(), err, cmd.UseLine(), cmd.CommandPath())
				}
			}
			names := strings.Fields(cmd.Use)[1:]
			for i, a := range args {
				r := roleSrc
				if len(roles) > 0 {
					r = roles[min(i, len(roles)-1)]
				}
				what := cmd.Name()
				if i < len(names) {
					what += " " + names[i]
				}
				if err := checkLocation(what, a, r); err != nil {
					return err
				}
			}
			if f := cmd.Flags().Lookup("check"); f != nil && f.Changed {
				return checkLocation(cmd.Name()+" --check", f.Value.String(), roleLocal)
			}
			return nil
		}
	}
}

// checkLocation fails for a scheme:// the role does not support.
func checkLocation(what, p string, r role) error {
	m := schemeRE.FindStringSubmatch(p)
	if m == nil {
		return nil
	}
	scheme := strings.ToLower(m[1])
	if slices.Contains(r.schemes, scheme) {
		return nil
	}
	supported := "local paths only"
	if len(r.schemes) > 0 {
		supported = "local paths and " + strings.Join(r.schemes, "://, ") + "://"
	}
	return fmt.Errorf("%s %s: cannot %s %s:// locations (supported: %s)", what, termtext.Name(p), r.verb, scheme, supported)
}
