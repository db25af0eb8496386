package main

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Memory. A plan holds every source header and every output layout: its
// live heap grows with the tensor count, not with the data, and the executor
// adds up to 64 MiB per job of bounded buffers. While a plan of many tensors
// is built the collector keeps the heap within a quarter of what is live;
// once it is built the limit is what is live plus the jobs' buffers. GOGC or
// GOMEMLIMIT, when set, win.

// gcPace sets the collector's pace unless GOGC or GOMEMLIMIT set it.
func gcPace(percent int) {
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetGCPercent(percent)
	}
}

// planMemory applies the planning phase's collector setting.
func planMemory() { gcPace(25) }

// smallPlanTensors is the tensor count under which a plan's heap (about
// 500 bytes a tensor) stays small enough for the collector's default pace:
// collecting at a quarter of it, as for full K3, would cost more CPU than
// the whole plan saves in memory.
const smallPlanTensors = 150_000

// smallPlanIndex is the index size (about 117 bytes a tensor) of a
// checkpoint of smallPlanTensors.
const smallPlanIndex = smallPlanTensors * 117

// localIndexMemory relaxes the collector before a local source is opened
// when its index says the plan stays small: opening (the index and every
// header) is most of what planning allocates.
func localIndexMemory(src string) {
	if fi, err := os.Stat(filepath.Join(src, safetensors.IndexName)); err == nil && fi.Mode().IsRegular() && fi.Size() < smallPlanIndex {
		gcPace(100)
	}
}

// setMemoryLimit bounds the heap at what is live now plus 64 MiB per job
// (and a margin for the run's small allocations). For a plan of many
// tensors a collection measures what is live; a small plan's heap is small
// enough to take whole, garbage included (a bound a little higher than the
// live heap), without the collection's pause before the first write.
func setMemoryLimit(jobs, tensors int) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
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
