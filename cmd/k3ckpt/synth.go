package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/model"
)

func newSynthCmd() *cobra.Command {
	opts := model.SynthOptions{Scale: model.ScaleTiny}
	var configPath string
	var jobs int
	var asJSON, dryRun bool
	cmd := &cobra.Command{
		Use:   "synth DIR",
		Short: "Write a faithful replica checkpoint (config, index, shards) of Kimi-K3 or another built-in family",
		Long: `synth writes config.json, model.safetensors.index.json and the shards of a
Kimi-K3 checkpoint replica with the real names, dtypes, file split and byte
layout. --scale full uses the real dimensions (use --header-only: data regions
become holes of sparse files, so 1.45 TB costs only the headers); small (~1 GB)
and tiny (<64 MB) keep the 93-layer schedule with smaller dimensions and real
seeded values. The same --seed gives the same bytes on every machine.
--family deepseek-v3 writes DeepSeek-V3 instead: at --scale full its
published config.json and 163 files (FP8 block weights with
weight_scale_inv), at --scale tiny a small config with its keys.
--family deepseek-v4 writes DeepSeek-V4-Flash: its names, dtypes and shapes
as vLLM's V4 loaders read them (FP8 weights with an F8_E8M0 .scale, FP4
experts two codes a byte), from a config reconstructed from the reported
fields (the release's config.json bytes were not found) and a derived
placement of one file per layer; --scale tiny, a small config with its keys.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if opts.Workers, err = resolveJobs(jobs, 0); err != nil {
				return err
			}
			cfgJSON := []byte(nil)
			if configPath != "" {
				if cfgJSON, err = fsx.ReadFile(configPath, model.MaxConfigSize); err != nil {
					return err
				}
				opts.Config = cfgJSON
			} else if cfgJSON, err = model.FamilyConfigJSON(opts.Family, opts.Scale); err != nil {
				return err
			}
			cfg, err := model.ParseConfig(cfgJSON)
			if err != nil {
				if configPath != "" {
					return fmt.Errorf("%s: %w", configPath, err)
				}
				return err
			}
			dir := args[0]
			what := opts.Scale.String()
			if opts.Family != "" && opts.Family != "kimi-k3" {
				what = opts.Family + " " + what
			}
			if configPath != "" {
				what = configPath
			}
			mode := "with data"
			if opts.HeaderOnly {
				mode = "header-only"
			}
			result := map[string]any{
				"dir": dir, "replica": what, "header_only": opts.HeaderOnly, "seed": opts.Seed,
				"shards": cfg.SynthShards(), "tensors": cfg.NumTensors(), "tensor_bytes": cfg.TotalBytes(),
			}
			head := fmt.Sprintf("synth %s (%s, seed %d)", what, mode, opts.Seed)
			holds := fmt.Sprintf("%s, %s, %.2f GiB of tensor data", termtext.Plural(int64(cfg.SynthShards()), "shard", "shards"),
				termtext.Plural(int64(cfg.NumTensors()), "tensor", "tensors"), gib(cfg.TotalBytes()))
			if dryRun {
				result["dry_run"] = true
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), result)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "dry run: %s would write %s into %s; nothing written\n", head, holds, dir)
				return nil
			}
			bar := newProgress(cmd, asJSON, "synth (shards)", unitItems)
			bar.Start(int64(cfg.SynthShards()))
			opts.Progress = func(int, int) { bar.Add(1) }
			start := time.Now()
			err = model.Synth(dir, opts)
			bar.finish()
			if err != nil {
				return err
			}
			elapsed := time.Since(start)
			disk := diskUsage(dir)
			result["disk_bytes"], result["seconds"] = disk, elapsed.Seconds()
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), result)
			}
			fmt.Fprintf(summary(cmd), "%s: %s; %.1f MiB on disk; %s\n", head, holds, mib(disk), elapsed.Round(time.Millisecond))
			return nil
		},
	}
	f := cmd.Flags()
	f.Var(&opts.Scale, "scale", "replica dimensions: full, small or tiny")
	f.StringVar(&opts.Family, "family", "kimi-k3", "built-in model family to replicate: "+strings.Join(model.BuiltinFamilies(), ", ")+" (deepseek-v3, deepseek-v4: full and tiny scales)")
	f.BoolVar(&opts.HeaderOnly, "header-only", false, "write headers only; data regions stay sparse holes")
	f.Uint64Var(&opts.Seed, "seed", 0, "seed of the values")
	f.BoolVar(&opts.Force, "force", false, "write into a non-empty directory (replaces its shards, index and config)")
	addJobsFlag(f, &jobs)
	f.StringVar(&configPath, "config", "", "replicate this config.json instead of a built-in scale")
	f.BoolVar(&asJSON, "json", false, "print one JSON object (no progress display)")
	f.BoolVar(&dryRun, "dry-run", false, "print what would be written, write nothing")
	cmd.MarkFlagsMutuallyExclusive("scale", "config")
	cmd.MarkFlagsMutuallyExclusive("family", "config")
	return cmd
}

// diskUsage is the space dir's files occupy (see allocated).
func diskUsage(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += allocated(fi)
		}
	}
	return n
}
