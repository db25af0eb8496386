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

// The schemes a command reads from and writes to; any other scheme:// is an
// error, never a local path (a DST "s3://b/x" must not become ./s3:/b/x).
var (
	readSchemes   = []string{"hf", "http", "https", "s3", "gs"}
	bucketSchemes = []string{"s3", "gs"}
)

// role is what a positional argument is to its command.
type role int

const (
	roleSrc    role = iota // a checkpoint read: a local path or a remote source
	roleLocal              // read, local only (an export's or a conversion's directory)
	roleDst                // written: a local path
	roleBucket             // written: a local path or an object store
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

// checkLocations wraps every subcommand's argument check: a wrong count
// says how the command is called (cobra's "accepts 2 arg(s), received 0"
// does not), and an unsupported scheme:// in an argument or reassemble
// --check fails before anything runs.
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
	ok, verb := readSchemes, "read from"
	switch r {
	case roleLocal:
		ok = nil
	case roleDst:
		ok, verb = nil, "write to"
	case roleBucket:
		ok, verb = bucketSchemes, "write to"
	}
	if slices.Contains(ok, scheme) {
		return nil
	}
	supported := "local paths only"
	if len(ok) > 0 {
		supported = "local paths and " + strings.Join(ok, "://, ") + "://"
	}
	return fmt.Errorf("%s %s: cannot %s %s:// locations (supported: %s)", what, termtext.Name(p), verb, scheme, supported)
}
