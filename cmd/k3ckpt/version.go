package main

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// revision is the VCS revision given at link time (-ldflags "-X
// main.revision=…", as scripts/release.sh does), for builds the go command
// does not stamp: -buildvcs=false, or a git worktree, whose .git is a file.
var revision string

// noRevision says how to get a revision into a build that has none.
const noRevision = `revision unknown: built without VCS stamping (-buildvcs=false, or outside a plain git clone); build with scripts/release.sh, or go build -ldflags "-X main.revision=$(git rev-parse HEAD)" ./cmd/k3ckpt`

// buildVersion is what the binary knows about its own build, as the go
// command stamped it (Version: a tag, a pseudo-version, or "(devel)").
type buildVersion struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	// Note says why Revision is missing and how to stamp it.
	Note string `json:"note,omitempty"`
}

func readVersion() buildVersion {
	v := buildVersion{Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok { // what the go command recorded
		v.Module, v.Version = bi.Main.Path, bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Revision = cmp.Or(v.Revision, revision); v.Revision == "" {
		v.Note = noRevision
	}
	return v
}

// versionString is the one-line form: "v0.1.0 (rev 6c1cde5b1a2f, 2026-12-01T08:00:00Z, modified) go1.26.8 linux/amd64".
func versionString(v buildVersion) string {
	s := v.Version
	if v.Revision != "" {
		s += " (rev " + v.Revision[:min(len(v.Revision), 12)]
		if v.Time != "" {
			s += ", " + v.Time
		}
		if v.Modified {
			s += ", modified"
		}
		s += ")"
	} else if v.Note != "" {
		s += " (" + v.Note + ")"
	}
	return s + " " + v.Go + " " + v.Platform
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and platform of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := readVersion()
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "k3ckpt", versionString(v))
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}
