package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

func newMergeCmd() *cobra.Command {
	var asJSON, dryRun bool
	var stateDir string
	cmd := &cobra.Command{
		Use:   "merge DST",
		Short: "Finish a multi-worker conversion: write the index, config and manifest once every slice is done",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dryRun {
				st, err := convert.StatusOfMerge(args[0], stateDir)
				if err != nil {
					return err
				}
				if asJSON {
					err = writeJSON(cmd.OutOrStdout(), st)
				} else {
					_, err = fmt.Fprintln(cmd.OutOrStdout(), st)
				}
				if err == nil && !st.Ready && !st.Finalized {
					why := fmt.Sprintf("%d of %d files missing", len(st.Missing), len(st.Done)+len(st.Missing))
					if st.Running != "" {
						why += ", worker " + st.Running + " still running"
					}
					return fmt.Errorf("merge %s would refuse (%s): %w", args[0], why, convert.ErrIncomplete)
				}
				return err
			}
			m, err := convert.Finalize(args[0], stateDir)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"dst": args[0], "plan": m.Plan, "manifest": convert.ManifestName, "files": len(m.Files)})
			}
			fmt.Fprintf(summary(cmd), "merged %s: manifest %s lists %s (plan %.12s)\n", args[0], convert.ManifestName,
				termtext.Plural(int64(len(m.Files)), "file", "files"), m.Plan)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	stateDirFlag(cmd.Flags(), &stateDir)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say which files are done and missing and what merge would write, changing nothing (exit 1 when merge would refuse)")
	return cmd
}
