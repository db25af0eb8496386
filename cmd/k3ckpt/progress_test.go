package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	for _, c := range []struct {
		unit        progressUnit
		done, total int64
		elapsed     time.Duration
		want        string
	}{
		// 1.25 GiB of 4 GiB in 10 s: 128 MiB/s, 2.75 GiB left = 22 s.
		{unitBytes, 5 << 28, 4 << 30, 10 * time.Second, "x  1.25 / 4.00 GiB   31%  128.00 MiB/s  ETA 0:22"},
		// Below 1 GiB everything is MiB.
		{unitBytes, 1 << 20, 512 << 20, time.Second, "x  1.00 / 512.00 MiB    0%  1.00 MiB/s  ETA 8:31"},
		// Unknown total: no percent, no ETA.
		{unitBytes, 3 << 30, 0, 3 * time.Second, "x  3.00 GiB  1.00 GiB/s"},
		{unitItems, 12, 96, 6 * time.Second, "x  12 / 96   12%  ETA 0:42"},
		{unitItems, 96, 96, 6 * time.Second, "x  96 / 96  100%"},
	} {
		if got := progressLine("x", c.unit, c.done, c.total, c.elapsed); got != c.want {
			t.Errorf("progressLine(%d, %d, %v) = %q, want %q", c.done, c.total, c.elapsed, got, c.want)
		}
	}
}

func TestProgressClock(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0:00", 59 * time.Second: "0:59", 61 * time.Second: "1:01", 3723 * time.Second: "1:02:03"} {
		if got := clockText(d); got != want {
			t.Errorf("Clock(%v) = %q, want %q", d, got, want)
		}
	}
}

// A nil progressBar is what quiet and non-terminal runs get: every method is a no-op.
func TestProgressNilBar(t *testing.T) {
	var b *progressBar
	b.Start(10)
	b.Add(5)
	b.finish()
}

// The bar redraws in place (carriage return, no newline), throttled, and
// erases its line at the end.
func TestProgressBarDraws(t *testing.T) {
	var out bytes.Buffer
	clock := time.Unix(0, 0)
	b := &progressBar{w: &out, label: "copy", unit: unitItems, now: func() time.Time { return clock }}
	b.Start(4)
	for range 4 {
		clock = clock.Add(time.Second)
		b.Add(1)
		b.Add(0) // same instant: throttled
	}
	b.finish()
	b.Add(1) // after finish: nothing
	s := out.String()
	if strings.Contains(s, "\n") {
		t.Errorf("output has a newline: %q", s)
	}
	if n := strings.Count(s, "\r"); n != 4+2 {
		t.Errorf("%d carriage returns, want 4 redraws + erase (2): %q", n, s)
	}
	if !strings.Contains(s, "copy  4 / 4  100%") {
		t.Errorf("last redraw missing: %q", s)
	}
	if !strings.HasSuffix(s, "\r"+strings.Repeat(" ", len("copy  1 / 4   25%  ETA 0:03"))+"\r") {
		t.Errorf("line not erased: %q", s)
	}
}
