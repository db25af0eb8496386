package main

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// The transfer flags reach the source's options, on every command that reads
// a source, with one meaning; bad values are refused naming the flag.
func TestTransferFlags(t *testing.T) {
	for _, mk := range []func() *cobra.Command{newConvertCmd, newShardCmd, newExportCmd} {
		cmd := mk()
		var o remote.Options
		if err := cmd.ParseFlags([]string{"--min-rate", "1MiB", "--time-limit", "90s"}); err != nil {
			t.Fatalf("%s: %v", cmd.Name(), err)
		}
		if err := transferOptions(cmd, &o); err != nil || o.MinRate != 1<<20 || o.TimeLimit != 90*time.Second {
			t.Errorf("%s: %+v %v", cmd.Name(), o, err)
		}
		cmd = mk()
		if err := cmd.ParseFlags([]string{"--min-rate", "0"}); err != nil {
			t.Fatal(err)
		}
		if err := transferOptions(cmd, &o); err != nil || o.MinRate >= 0 {
			t.Errorf("%s: --min-rate 0: %d %v, want none (negative)", cmd.Name(), o.MinRate, err)
		}
		for _, bad := range [][]string{{"--min-rate", "fast"}, {"--time-limit", "0s"}} {
			cmd = mk()
			if err := cmd.ParseFlags(bad); err != nil {
				t.Fatal(err)
			}
			if err := transferOptions(cmd, &o); err == nil || !strings.Contains(err.Error(), bad[0]) {
				t.Errorf("%s %v: %v, want an error naming %s", cmd.Name(), bad, err, bad[0])
			}
		}
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Without a terminal, -v prints the network progress as lines, retries
// included, and stops when the transfer is done.
func TestNetProgressLines(t *testing.T) {
	nm := &netMeter{start: time.Now()}
	nm.total.Store(4 << 20)
	nm.Fetched(1 << 20)
	nm.Retry(remote.RetryEvent{File: "a", Attempt: 1, Err: errors.New("boom")})
	var w syncBuf
	nm.startLog(&w, "network (received)", time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(w.String(), "\n") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	nm.done()
	out := w.String()
	if !strings.Contains(out, "network (received)") || !strings.Contains(out, "1.00 / 4.00 MiB") || !strings.Contains(out, "1 retries (last: boom)") {
		t.Fatalf("progress lines %q", out)
	}
	n := len(w.String())
	time.Sleep(10 * time.Millisecond)
	if len(w.String()) != n {
		t.Error("lines printed after done")
	}
}
