// Command k3ckpt converts, audits and shards Kimi-K3-class safetensors
// checkpoints. It is a thin layer over the library packages: every subcommand
// parses flags, calls one library entry point and prints its result.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// rootCmd is the top of the command tree; subcommands register themselves in
// their own files' init functions.
var rootCmd = &cobra.Command{
	Use:           "k3ckpt",
	Short:         "Convert, inspect and shard Kimi-K3-class safetensors checkpoints",
	SilenceUsage:  true,
	SilenceErrors: true,
}

// exitError carries a specific exit status out of a subcommand.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "k3ckpt:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}
