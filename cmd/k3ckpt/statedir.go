package main

import "github.com/spf13/pflag"

// stateDirFlag registers --state-dir on a command that writes to, or
// finishes, a bucket DST.
func stateDirFlag(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "state-dir", "", "where the run records of an s3:// or gs:// DST live (plan, done records, locks; default: under the user's cache directory, named after DST); the workers of one --worker split share it")
}
