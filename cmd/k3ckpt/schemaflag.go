package main

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/model"
)

// schemaCommands are the commands that read a checkpoint's config, and so
// take --schema.
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
