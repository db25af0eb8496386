package main

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Memory. A plan holds every source header (the codec's checkpoint) and
// every output layout: for full K3 (497,220 tensors) about 240 MiB live
// (580 MiB with --experts nvfp4),
// growing with the tensor count, not with the data. The executor adds up to
// 64 MiB per job of bounded buffers. While the plan is built the collector
// keeps the heap within a quarter of what is live (instead of twice) when the
// checkpoint has many tensors; once
// it is built the limit is what is live plus the jobs' buffers, so the heap
// stays there without the collector running continuously. GOGC or
// GOMEMLIMIT, when set, win.

// planMemory applies the planning phase's collector setting.
func planMemory() {
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetGCPercent(25)
	}
}

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
		defaultCollector()
	}
}

// sourceMemory relaxes the collector once the source is open, for a
// checkpoint whose plan stays small.
func sourceMemory(tensors int) {
	if tensors < smallPlanTensors {
		defaultCollector()
	}
}

// defaultCollector puts the collector back to its default pace, unless GOGC
// or GOMEMLIMIT set it.
func defaultCollector() {
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetGCPercent(100)
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
