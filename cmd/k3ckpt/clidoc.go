package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

//go:generate go test -run TestCLIDoc -update .

// writeCLIDoc writes the Markdown reference of the command tree: every
// command's synopsis, description and flags, and the global flags. It is
// the one copy of the synopsis (docs/CLI.md); a test fails when the file
// differs from what the tree says.
func writeCLIDoc(w io.Writer, root *cobra.Command) {
	fmt.Fprintf(w, "# k3ckpt command reference\n\n")
	fmt.Fprintf(w, "Generated from the command tree by `go generate ./cmd/k3ckpt`; do not edit.\n\n")
	fmt.Fprintf(w, "%s\n\n", root.Short)
	fmt.Fprintf(w, "| command | what it does |\n|---|---|\n")
	for _, c := range root.Commands() {
		if docCommand(c) {
			fmt.Fprintf(w, "| [`%s`](#k3ckpt-%s) | %s |\n", c.Name(), c.Name(), c.Short)
		}
	}
	fmt.Fprintf(w, "\n## Global flags\n\n```\n%s```\n", root.PersistentFlags().FlagUsagesWrapped(100))
	fmt.Fprintf(w, "\nEvery `--json` output is one JSON object on stdout whose first field is `\"schema\": %d`.\n", jsonSchema)
	fmt.Fprintf(w, "Progress is drawn on stderr only when it is a terminal, and never under `--json` or `-q`.\n")
	for _, c := range root.Commands() {
		if !docCommand(c) {
			continue
		}
		fmt.Fprintf(w, "\n## k3ckpt %s\n\n%s\n\n```\nk3ckpt %s\n```\n", c.Name(), c.Short, strings.TrimPrefix(c.UseLine(), "k3ckpt "))
		if c.Long != "" {
			fmt.Fprintf(w, "\n```\n%s\n```\n", strings.TrimRight(c.Long, "\n"))
		}
		if fl := c.LocalNonPersistentFlags(); fl.HasAvailableFlags() {
			fmt.Fprintf(w, "\nFlags:\n\n```\n%s```\n", fl.FlagUsagesWrapped(100))
		}
	}
}

// docCommand says whether a command belongs in the reference (not cobra's
// own help and completion commands).
func docCommand(c *cobra.Command) bool {
	return c.IsAvailableCommand() && c.Name() != "help" && c.Name() != "completion"
}
