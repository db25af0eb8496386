package convert

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/model"
)

// Benchmarks of the converter as users run it: the k3ckpt binary converting
// the small replica with --jobs 2, side by side with `cp -r` of the same
// checkpoint on the same filesystem, and the converter's peak resident set
// (the kernel's high-water mark, VmHWM, which wait4 returns as ru_maxrss).
// Replicas are generated once into $K3CKPT_BENCH_DIR (default: the temp dir)
// and reused; put that directory on the disk to measure.
//
//	go test -run XXX -bench Convert -benchtime 3x ./convert

func benchDir(b *testing.B) string {
	dir := os.Getenv("K3CKPT_BENCH_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "k3ckpt-bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	return dir
}

// replica returns a cached replica made from config (nil: the small scale).
func replica(b *testing.B, name string, config []byte) string {
	dir := filepath.Join(benchDir(b), name)
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		return dir
	}
	os.RemoveAll(dir)
	b.Logf("generating the %s replica in %s (once)", name, dir)
	if err := model.Synth(dir, model.SynthOptions{Scale: model.ScaleSmall, Config: config}); err != nil {
		b.Fatal(err)
	}
	return dir
}

// config4x is the small replica's config with every matrix of the layers 4×
// larger (each dimension doubled) and a quarter of the experts, so that
// tensors are 4× larger while the checkpoint stays a few GB.
func config4x(b *testing.B) []byte {
	raw, err := model.FamilyConfigJSON("", model.ScaleSmall)
	if err != nil {
		b.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		b.Fatal(err)
	}
	text := cfg["text_config"].(map[string]any)
	for _, k := range []string{"hidden_size", "intermediate_size", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
		"qk_rope_head_dim", "v_head_dim", "moe_intermediate_size", "routed_expert_hidden_size", "vocab_size"} {
		text[k] = text[k].(float64) * 2
	}
	text["num_experts"] = text["num_experts"].(float64) / 4
	lin := text["linear_attn_config"].(map[string]any)
	lin["head_dim"] = lin["head_dim"].(float64) * 2
	if v, ok := cfg["vision_config"].(map[string]any); ok {
		v["text_hidden_size"] = text["hidden_size"]
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// runTimed runs a command and returns its wall time and peak RSS in bytes.
func runTimed(b *testing.B, name string, args ...string) (time.Duration, int64) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s %v: %v: %s", name, args, err, out.String())
	}
	d := time.Since(start)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return d, ru.Maxrss * 1024
}

func benchConvert(b *testing.B, src string) {
	bin := buildCLIBench(b)
	size := dirBytes(b, src)
	work := filepath.Join(filepath.Dir(src), "out-"+filepath.Base(src))
	var convT, cpT, syncT time.Duration
	var peak int64
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		os.RemoveAll(work)
		exec.Command("sync").Run()
		d, _ := runTimed(b, "cp", "-r", src, work)
		cpT += d
		s, _ := runTimed(b, "sync")
		syncT += s
		os.RemoveAll(work)
		exec.Command("sync").Run()
		d, rss := runTimed(b, bin, "convert", src, work, "--jobs", "2")
		convT += d
		peak = max(peak, rss)
		n++
	}
	os.RemoveAll(work)
	mbs := func(d time.Duration) float64 { return float64(size) * float64(n) / 1e6 / d.Seconds() }
	b.ReportMetric(mbs(convT), "convert-MB/s")
	b.ReportMetric(mbs(cpT), "cp-r-MB/s")
	b.ReportMetric(mbs(cpT+syncT), "cp-r+sync-MB/s")
	b.ReportMetric(mbs(convT)/mbs(cpT), "ratio-vs-cp")
	b.ReportMetric(mbs(convT)/mbs(cpT+syncT), "ratio-vs-cp+sync")
	b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
	b.Logf("%s: %.2f GB; convert %.0f MB/s, cp -r %.0f MB/s (%.0f MB/s with sync), ratio %.2f; peak RSS %.1f MiB (bound %d MiB for --jobs 2)",
		filepath.Base(src), float64(size)/1e9, mbs(convT), mbs(cpT), mbs(cpT+syncT), mbs(convT)/mbs(cpT), float64(peak)/(1<<20), 256+2*64)
}

func BenchmarkConvertSmall(b *testing.B) { benchConvert(b, replica(b, "small", nil)) }

func BenchmarkConvertSmall4xTensors(b *testing.B) {
	benchConvert(b, replica(b, "small-4x", config4x(b)))
}

func buildCLIBench(b *testing.B) string {
	bin := filepath.Join(benchDir(b), "k3ckpt")
	// go test puts its own toolchain first on the PATH of the tests.
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/k3ckpt/k3ckpt/cmd/k3ckpt").CombinedOutput(); err != nil {
		b.Fatalf("build: %v: %s", err, out)
	}
	return bin
}
