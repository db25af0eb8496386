package main

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Memory. A plan holds every source header and output layout: its live heap
// grows with the tensor count, not the data, and the executor adds up to
// 64 MiB per job of bounded buffers. GOGC or GOMEMLIMIT, when set, win.

// gcFromEnv reports whether GOGC or GOMEMLIMIT sets the collector.
func gcFromEnv() bool { return os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" }

// gcPace sets the collector's pace unless the environment sets it.
func gcPace(percent int) {
	if !gcFromEnv() {
		debug.SetGCPercent(percent)
	}
}

// smallPlanTensors is the tensor count under which a plan's heap (about
// 500 bytes a tensor) is small enough for the default pace: collecting at a
// quarter of it, as for full K3, would cost more CPU than it saves memory.
const smallPlanTensors = 150_000

// smallPlanIndex is the index size (about 117 bytes a tensor) of a
// checkpoint of smallPlanTensors.
const smallPlanIndex = smallPlanTensors * 117

// planMemory keeps the heap within a quarter of what is live while a plan
// from src is built (opening the index and headers is most of what it
// allocates), unless src is local and its index says the plan stays small.
func planMemory(src string) {
	if fi, err := os.Stat(filepath.Join(src, safetensors.IndexName)); err == nil && fi.Mode().IsRegular() && fi.Size() < smallPlanIndex {
		gcPace(100)
	} else {
		gcPace(25)
	}
}

// setMemoryLimit bounds the heap at what is live now plus 64 MiB per job
// and a margin. A small plan's heap is taken whole, garbage included,
// sparing the collection's pause before the first write.
func setMemoryLimit(jobs, tensors int) {
	if gcFromEnv() {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	if tensors < smallPlanTensors {
		sample[0].Name = "/memory/classes/heap/objects:bytes" // live and not yet swept
	} else {
		runtime.GC()
	}
	metrics.Read(sample)
	var live int64
	if sample[0].Value.Kind() == metrics.KindUint64 {
		live = int64(sample[0].Value.Uint64())
	}
	debug.SetMemoryLimit(live + 64<<20*int64(max(jobs, 1)) + 64<<20)
	debug.SetGCPercent(100)
}
