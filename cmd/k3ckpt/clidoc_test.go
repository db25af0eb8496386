package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

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

var update = flag.Bool("update", false, "rewrite docs/CLI.md from the command tree")

const cliDocPath = "../../docs/CLI.md"

// TestCLIDoc keeps docs/CLI.md, the one copy of the command synopsis, equal
// to what the command tree says; `go generate ./cmd/k3ckpt` rewrites it.
func TestCLIDoc(t *testing.T) {
	var buf bytes.Buffer
	writeCLIDoc(&buf, newRootCmd())
	if *update {
		if err := os.WriteFile(cliDocPath, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatalf("%v (run: go generate ./cmd/k3ckpt)", err)
	}
	if !bytes.Equal(have, buf.Bytes()) {
		t.Errorf("docs/CLI.md is stale: run go generate ./cmd/k3ckpt")
	}
}

// TestEveryCommandHasJSON: every command that prints a result offers --json,
// and every writing command --dry-run.
func TestEveryCommandHasJSON(t *testing.T) {
	writing := map[string]bool{"synth": true, "convert": true, "shard": true, "export": true, "reassemble": true}
	for _, c := range newRootCmd().Commands() {
		if !docCommand(c) || c.Name() == "demo" {
			continue
		}
		if c.Flags().Lookup("json") == nil {
			t.Errorf("%s has no --json", c.Name())
		}
		if writing[c.Name()] && c.Flags().Lookup("dry-run") == nil {
			t.Errorf("%s writes but has no --dry-run", c.Name())
		}
		if j := c.Flags().Lookup("jobs"); j != nil && (j.DefValue != "0" || j.Usage != jobsUsage) {
			t.Errorf("%s --jobs: default %s, usage %q: want the one meaning", c.Name(), j.DefValue, j.Usage)
		}
	}
}
