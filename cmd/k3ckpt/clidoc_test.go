package main

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

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
