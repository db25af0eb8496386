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

// BenchmarkReportOverhead measures what quantization_report.json costs
// convert: each case converts with the error measurement off and on, side
// by side. One op is a round of two arms, off then on or on then off
// (alternating from round to round); an arm repeats the conversion until it
// has run at least a second (reps, calibrated once per case), so a stall of
// a few milliseconds does not move a ratio. Each round gives a ratio of its
// two arms: on/off of wall clock, cpu-on/off of the process's user + system
// CPU time (which other work on the machine disturbs less). The metrics are
// the median of the rounds' ratios and their smallest and largest (-min,
// -max): a spread wider than the distance from 1 says the figure is noise.
// Both arms write quantization_report.json (the off arm's has zero sums), so
// its own write is not in the ratio.
//
//	go test -run XXX -bench ReportOverhead -benchtime 10x ./convert
func BenchmarkReportOverhead(b *testing.B) {
	bf16 := filepath.Join(b.TempDir(), "bf16")
	for _, c := range []struct {
		name, recipe, src string
		opts              Options
	}{
		{"fp8-default", AttnMoEDenseFP8, tinySrc(b), Options{}},
		{"fp8-modelopt-nvfp4", ModelOptK3, tinySrc(b), Options{Format: modelOpt, Experts: ExpertsNVFP4, Numerics: quant.ModelOpt}},
		{"mxfp4-pack", BF16, bf16, Options{Experts: ExpertsMXFP4}},
		{"fp8-experts", AttnMoEDenseFP8, tinySrc(b), Options{Experts: ExpertsFP8}},
		// The small replica (0.86 GiB), whose tensors have realistic shapes.
		{"fp8-default-small", AttnMoEDenseFP8, "small", Options{}},
		{"fp8-experts-small", AttnMoEDenseFP8, "small", Options{Experts: ExpertsFP8}},
		{"fp8-modelopt-nvfp4-small", ModelOptK3, "small", Options{Format: modelOpt, Experts: ExpertsNVFP4, Numerics: quant.ModelOpt}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.src == "small" {
				c.src = replica(b, "small", nil)
			}
			if c.src == bf16 {
				if _, err := os.Stat(bf16); err != nil {
					convertBench(b, tinySrc(b), bf16, BF16, Options{Experts: ExpertsBF16})
				}
			}
			dst := filepath.Join(b.TempDir(), "out")
			arm := func(reps int, measure bool) (wall, cpu time.Duration) {
				measureErrors = measure
				defer func() { measureErrors = true }()
				t0, c0 := time.Now(), cpuTime(b)
				for range reps {
					convertBench(b, c.src, dst, c.recipe, c.opts)
					os.RemoveAll(dst)
				}
				return time.Since(t0), cpuTime(b) - c0
			}
			b.StopTimer()
			once, _ := arm(1, true) // warms the page cache too
			reps := max(1, int((time.Second+once-1)/once))
			b.StartTimer()
			var wall, cpu []float64
			i := 0
			for b.Loop() {
				var w, c [2]time.Duration // off, on
				for j := range 2 {
					on := (i+j)%2 == 1
					k := 0
					if on {
						k = 1
					}
					w[k], c[k] = arm(reps, on)
				}
				wall = append(wall, float64(w[1])/float64(w[0]))
				cpu = append(cpu, float64(c[1])/float64(c[0]))
				i++
			}
			b.ReportMetric(float64(reps), "reps")
			reportSpread(b, wall, "on/off")
			reportSpread(b, cpu, "cpu-on/off")
		})
	}
}

// reportSpread reports the median of the rounds' ratios as unit and their
// smallest and largest as unit-min and unit-max.
func reportSpread(b *testing.B, r []float64, unit string) {
	slices.Sort(r)
	m := r[len(r)/2]
	if n := len(r); n%2 == 0 {
		m = (r[n/2-1] + r[n/2]) / 2
	}
	b.ReportMetric(m, unit)
	b.ReportMetric(r[0], unit+"-min")
	b.ReportMetric(r[len(r)-1], unit+"-max")
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

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
