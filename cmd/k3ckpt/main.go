// Command k3ckpt converts, audits and shards Kimi-K3-class safetensors
// checkpoints. It is a thin layer over the library packages: every subcommand
// parses flags, calls one library entry point and prints its result.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// newRootCmd builds the whole command tree: the global flags and every
// subcommand, each a fresh value (tests and the doc generator build their own).
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "k3ckpt",
		Short:         "Convert, inspect and shard Kimi-K3-class safetensors checkpoints",
		Version:       versionString(readVersion()),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("k3ckpt {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.BoolP("quiet", "q", false, "print only errors and the requested output: no progress, no summaries of writing commands")
	pf.BoolP("verbose", "v", false, "also print each file as it is written and the plan before a writing command starts")
	root.MarkFlagsMutuallyExclusive("quiet", "verbose")
	root.AddCommand(
		newSynthCmd(), newInspectCmd(), newConvertCmd(), newVerifyCmd(), newMergeCmd(),
		newShardCmd(), newExportCmd(), newReassembleCmd(), newDemoCmd(), newVersionCmd(),
	)
	checkLocations(root)
	return root
}

// exitError carries a specific exit status out of a subcommand.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit status. Errors are
// printed with their control characters escaped: they quote tensor names and
// paths taken from files.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "k3ckpt:", termtext.Lines(err.Error()))
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}
