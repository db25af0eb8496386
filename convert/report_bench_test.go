package convert

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// BenchmarkReportOverhead converts the tiny replica (and, for the MXFP4
// packing, its BF16 decode; and the small replica) with the error measurement off and on, side by
// side in alternating order, and reports the ratio of their median times
// (on/off: wall clock; cpu-on/off: the process's user + system CPU time,
// which other work on the machine disturbs less): what
// quantization_report.json costs convert.
//
//	go test -run XXX -bench ReportOverhead -benchtime 5x ./convert
func BenchmarkReportOverhead(b *testing.B) {
	bf16 := filepath.Join(b.TempDir(), "bf16")
	for _, c := range []struct {
		name, recipe, src string
		opts              Options
	}{
		{"fp8-default", AttnMoEDenseFP8, tinySrc, Options{}},
		{"fp8-modelopt-nvfp4", ModelOptK3, tinySrc, Options{Format: ModelOpt, Experts: ExpertsNVFP4, Numerics: quant.ModelOpt}},
		{"mxfp4-pack", BF16, bf16, Options{Experts: ExpertsMXFP4}},
		{"fp8-default-small", AttnMoEDenseFP8, "small", Options{}}, // the small replica (0.86 GiB)
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.src == "small" {
				c.src = replica(b, "small", nil)
			}
			if c.src == bf16 {
				if _, err := os.Stat(bf16); err != nil {
					convertBench(b, tinySrc, bf16, BF16, Options{Experts: ExpertsBF16})
				}
			}
			var on, off, cpuOn, cpuOff []time.Duration
			i := 0
			for b.Loop() {
				for j := range 2 {
					measure := (i+j)%2 == 1
					dst := filepath.Join(b.TempDir(), "out")
					measureErrors = measure
					t0, c0 := time.Now(), cpuTime(b)
					convertBench(b, c.src, dst, c.recipe, c.opts)
					d, cpu := time.Since(t0), cpuTime(b)-c0
					measureErrors = true
					if measure {
						on, cpuOn = append(on, d), append(cpuOn, cpu)
					} else {
						off, cpuOff = append(off, d), append(cpuOff, cpu)
					}
					os.RemoveAll(dst)
				}
				i++
			}
			// Medians: one conversion stalled by the machine's other work
			// does not decide the ratio.
			b.ReportMetric(float64(median(on))/float64(median(off)), "on/off")
			b.ReportMetric(float64(median(cpuOn))/float64(median(cpuOff)), "cpu-on/off")
		})
	}
}

func convertBench(b testing.TB, src, dst, recipe string, opts Options) {
	c, err := safetensors.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r, err := Lookup(recipe)
	if err != nil {
		b.Fatal(err)
	}
	p, err := NewPlan(c, nil, r, opts)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2}); err != nil {
		b.Fatal(err)
	}
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	if n := len(d); n%2 == 0 {
		return (d[n/2-1] + d[n/2]) / 2
	}
	return d[len(d)/2]
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
