package main

import (
	"os"
	"runtime"
)

// writerProcs lets Go run jobs more goroutines at once than it would by
// default (the CPUs it may use). A run's writers and committers wait for the
// disk inside system calls (direct writes, fsync) while holding one of those
// slots, and the runtime takes a slot back only after a while: with just one
// per CPU, the producers and hashers ready to run wait for it meanwhile.
// GOMAXPROCS, when set, wins.
func writerProcs(jobs int) {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + max(jobs, 1))
	}
}
