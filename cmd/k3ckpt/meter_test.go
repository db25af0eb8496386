package main

import (
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

func TestRateMeter(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newRateMeter(10_000, func() time.Time { return now })
	if s := m.read(); s.ETA != -1 || s.Rate != 0 {
		t.Fatalf("no rate yet: %+v", s)
	}
	m.fetched(1000)
	now = now.Add(time.Second)
	s := m.read()
	if s.Bytes != 1000 || s.Rate != 1000 || s.ETA != 9*time.Second || s.Elapsed != time.Second {
		t.Fatalf("after 1 s: %+v", s)
	}
	// A poll sooner than the rate window keeps the rate.
	m.fetched(5000)
	now = now.Add(100 * time.Millisecond)
	if s := m.read(); s.Rate != 1000 || s.Bytes != 6000 {
		t.Fatalf("short poll: %+v", s)
	}
	// The next sample (5000 B in 1.1 s) moves the average a fifth of the way.
	now = now.Add(time.Second)
	s = m.read()
	inst := 5000 / 1.1
	if want := 1000 + 0.2*(inst-1000); s.Rate < want-1e-6 || s.Rate > want+1e-6 {
		t.Fatalf("rate %v, want %v", s.Rate, want)
	}
	m.retry(remote.RetryEvent{File: "x", Attempt: 1})
	m.setTotal(0)
	if s := m.read(); s.Retries != 1 || s.LastRetry == nil || s.LastRetry.File != "x" || s.ETA != -1 {
		t.Fatalf("retry, unknown total: %+v", s)
	}
}
