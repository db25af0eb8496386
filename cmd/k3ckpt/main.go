// Command k3ckpt converts, audits and shards Kimi-K3-class safetensors
// checkpoints. It is a thin layer over the library packages: every subcommand
// parses flags, calls one library entry point and prints its result.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/layout"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
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
		newSynthCmd(), newInspectCmd(), newCheckCmd(), newConvertCmd(), newVerifyCmd(), newMergeCmd(),
		newShardCmd(), newExportCmd(), newReassembleCmd(), newDemoCmd(runSelf), newVersionCmd(),
	)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nusage: %s (%s --help lists the flags)", err, c.UseLine(), c.CommandPath())
	})
	addSchemaFlags(root)
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		foldNameFlags(c)
		return useSchemaFlag(c)
	}
	checkLocations(root)
	return root
}

// nameFlags take a name from a fixed list, so their values match whatever
// their case: --experts NVFP4 is nvfp4. So does --layout when it names a
// built-in layout (a file's case matters).
var nameFlags = []string{"recipe", "format", "experts", "numerics", "scale-fmt", "nonfinite", "by", "pack-scales", "layout"}

func foldNameFlags(c *cobra.Command) {
	for _, n := range nameFlags {
		f := c.Flags().Lookup(n)
		if f == nil || !f.Changed {
			continue
		}
		v := strings.ToLower(f.Value.String())
		if v != f.Value.String() && (n != "layout" || slices.Contains(layout.Names(), v)) {
			_ = f.Value.Set(v) // a refused value is reported by the command's own parse
		}
	}
}

// schemaCommands read a checkpoint's config, and so take --schema.
var schemaCommands = []string{"synth", "inspect", "convert", "shard", "export"}

// addSchemaFlags gives each of schemaCommands --schema FILE.
func addSchemaFlags(root *cobra.Command) {
	for _, c := range root.Commands() {
		if slices.Contains(schemaCommands, c.Name()) {
			c.Flags().String("schema", "", "a model family's schema file (JSON, as the built-in model/families/k3.json), for a config whose model_type it lists")
		}
	}
}

// useSchemaFlag reads the command's --schema file, if it has one, before
// the command reads any config.
func useSchemaFlag(c *cobra.Command) error {
	f := c.Flags().Lookup("schema")
	if f == nil || f.Value.String() == "" {
		return nil
	}
	b, err := fsx.ReadFile(f.Value.String(), model.MaxConfigSize)
	if err == nil {
		err = model.UseSchema(b)
	}
	if err != nil {
		return fmt.Errorf("--schema %s: %w", f.Value.String(), err)
	}
	return nil
}

// withSourceHint says what to do when a checkpoint argument is a JSON file
// that is not an index (config.json, most often): pass its directory.
func withSourceHint(err error, args []string) error {
	if !errors.Is(err, safetensors.ErrIndex) {
		return err
	}
	for _, a := range args {
		if strings.HasPrefix(a, "-") || !strings.HasSuffix(strings.ToLower(a), ".json") || strings.HasSuffix(a, ".index.json") {
			continue
		}
		if fi, serr := os.Stat(a); serr == nil && fi.Mode().IsRegular() && strings.Contains(err.Error(), a) {
			return fmt.Errorf("%w\n%s is not a checkpoint index: pass the checkpoint directory (%s), or its model.safetensors.index.json", err, a, filepath.Dir(a))
		}
	}
	return err
}

// withDestHint rewords a convert.ErrDestination refusal for the user: what
// DST holds and the ways on, without the library's class in front (a
// "different conversion" is wrong for a DST of unrelated files).
func withDestHint(err error, args []string) error {
	if !errors.Is(err, convert.ErrDestination) {
		return err
	}
	msg := strings.Replace(err.Error(), convert.ErrDestination.Error()+": ", "", 1)
	restart := slices.Contains(args, "--restart") || slices.Contains(args, "--restart=true")
	switch {
	case strings.Contains(msg, " is converting plan "):
		msg += "\nits run is unfinished: to finish it, rerun the command that started it (its recipe and flags above);"
		if restart {
			msg += "\n--restart starts over only a run of the same plan;"
		}
		msg += "\nto give it up, delete that directory, or convert into another one"
	case strings.Contains(msg, " holds a finished conversion "):
		msg += "\nto replace it, delete that directory first, or convert into another one"
	case strings.Contains(msg, " holds no k3ckpt conversion"):
		msg += "\nconvert writes only into an empty or new directory, or one of its own runs: choose another, or empty this one"
	}
	return &cliError{msg: msg, err: err}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit status. Errors are
// printed with control characters escaped: they quote names from files.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := catchSignals(cancel, stderr)
	defer in.stop()
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	pre := root.PersistentPreRunE
	root.PersistentPreRunE = func(c *cobra.Command, a []string) error {
		in.started(c.Name())
		return pre(c, a)
	}
	err := root.ExecuteContext(ctx)
	if err != nil && in.received() != 0 {
		return in.report(stderr)
	}
	if err == nil {
		return 0
	}
	err = withDestHint(withSourceHint(err, args), args)
	msg := err.Error()
	if strings.HasPrefix(msg, "unknown command ") {
		// cobra indents its suggestions with a tab, which escaping would show as \t.
		msg = strings.ReplaceAll(strings.TrimRight(msg, "\n"), "\n\t", "\n  ") + "\n(k3ckpt --help lists the commands)"
	}
	fmt.Fprintln(stderr, "k3ckpt:", termtext.Lines(msg))
	var ce *cliError
	if errors.As(err, &ce) && ce.code != 0 {
		return ce.code
	}
	return 1
}
