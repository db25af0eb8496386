package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/objstore"
	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/layout"
)

func newReassembleCmd() *cobra.Command {
	var check string
	var jobs int
	var rf runFlags
	cmd := &cobra.Command{
		Use:   "reassemble DST OUT",
		Short: "Rebuild the source checkpoint from shard/export output and prove it lossless",
		Long: `reassemble reads the rank-NN or stage-NN directories of a shard or export
(their layout.json manifests) and writes the source checkpoint to OUT: every
source shard with its tensors rebuilt (slices gathered, dropped padding zero-
filled, packed scales unpacked), its metadata and canonical layout, the index
and config.json. For a lossless export the files are byte-identical to the
source; tensors the layout dropped (vision for text-only serving) are listed.
--check SRC compares every rebuilt tensor with SRC byte for byte.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if check != "" && !remote.IsRemote(check) && !objstore.IsURL(args[1]) {
				if err := fsx.Disjoint(args[1], check); err != nil {
					return fmt.Errorf("--check: %w", err)
				}
			}
			defer limitToSource(args[0])()
			if check != "" && !rf.dryRun && (!remote.IsRemote(args[0]) || objstore.IsURL(args[0])) {
				// Every file of DST, read back whole against the sums its
				// run took as the bytes streamed out, before OUT is written:
				// the reassembly reads only the tensors and the first
				// directory's side files.
				files, bytes, err := layout.CheckSums(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if !rf.asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "check: %d files of %s, %.3f GiB, match their SHA256SUMS\n", files, args[0], float64(bytes)/(1<<30))
				}
			}
			src, err := layout.OpenSource(args[0])
			if err != nil {
				return err
			}
			defer src.Close()
			plan, err := layout.PlanReassemble(src)
			if err != nil {
				return err
			}
			if err := runPlan(cmd, plan, args[1], jobs, &rf, nil, 0); err != nil || check == "" || rf.dryRun {
				return err
			}
			a, err := layout.OpenSource(check)
			if err != nil {
				return err
			}
			defer a.Close()
			b, _, err := openLayoutSource(cmd, args[1], remote.DefaultConnections)
			if err != nil {
				return err
			}
			defer b.Close()
			n, err := layout.Compare(cmd.Context(), a, b)
			if err != nil {
				return err
			}
			if !rf.asJSON {
				fmt.Fprintf(cmd.OutOrStdout(), "check: %d tensors, %.3f GiB byte-identical to %s\n", len(b.Specs), float64(n)/(1<<30), check)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&check, "check", "", "compare every rebuilt tensor with this source checkpoint")
	addJobsFlag(cmd.Flags(), &jobs)
	rf.register(cmd)
	return cmd
}
