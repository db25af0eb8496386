package main

// The one progress display of the commands: a status line on a terminal
// (done / total, percent, rate, ETA), redrawn a few times a second and erased
// at the end. Anything that is not a terminal gets nothing (clean logs).

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// barInterval is the least time between two redraws.
const barInterval = 200 * time.Millisecond

// progressBar is a progress display, safe for concurrent use. A nil
// *progressBar is valid and shows nothing.
type progressBar struct {
	w     io.Writer
	label string
	unit  progressUnit
	now   func() time.Time

	total atomic.Int64
	done  atomic.Int64

	mu    sync.Mutex
	start time.Time
	last  time.Time
	width int // columns of the last line drawn, to erase it
	ended bool
}

// progressUnit says what the counts are: bytes (shown in MiB/GiB) or items
// (shards, files).
type progressUnit uint8

const (
	unitBytes progressUnit = iota
	unitItems
)

// Start sets the total (0 or less: unknown, no percent or ETA) and starts the clock.
func (b *progressBar) Start(total int64) {
	if b == nil {
		return
	}
	b.total.Store(total)
	b.mu.Lock()
	b.start = b.now()
	b.mu.Unlock()
}

// Add counts n more done and redraws when the last redraw is old enough.
func (b *progressBar) Add(n int64) {
	if b == nil {
		return
	}
	b.done.Add(n)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return
	}
	t := b.now()
	if b.start.IsZero() {
		b.start = t
	}
	if t.Sub(b.last) >= barInterval {
		b.last = t
		b.draw(t)
	}
}

// finish erases the line; later calls draw nothing.
func (b *progressBar) finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ended && b.width > 0 {
		fmt.Fprintf(b.w, "\r%s\r", strings.Repeat(" ", b.width))
	}
	b.ended = true
}

func (b *progressBar) draw(t time.Time) {
	line := progressLine(b.label, b.unit, b.done.Load(), b.total.Load(), t.Sub(b.start))
	b.width = max(b.width, utf8.RuneCountInString(line)) // padded over the last line's tail
	fmt.Fprintf(b.w, "\r%-*s", b.width, line)
}

// progressLine is the text of one redraw: label, done/total, percent, rate and ETA
// ("convert  1.25 / 4.00 GiB  31%  210.4 MiB/s  ETA 0:13").
func progressLine(label string, unit progressUnit, done, total int64, elapsed time.Duration) string {
	var b strings.Builder
	b.WriteString(label)
	b.WriteString("  ")
	secs := elapsed.Seconds()
	if unit == unitItems {
		fmt.Fprintf(&b, "%d", done)
		if total > 0 {
			fmt.Fprintf(&b, " / %d", total)
		}
	} else {
		div, u := sizeScale(max(done, total))
		fmt.Fprintf(&b, "%.2f", float64(done)/div)
		if total > 0 {
			fmt.Fprintf(&b, " / %.2f", float64(total)/div)
		}
		b.WriteString(" " + u)
	}
	if total > 0 {
		fmt.Fprintf(&b, "  %3d%%", min(100, done*100/total))
	}
	if secs > 0 && done > 0 {
		rate := float64(done) / secs
		if unit == unitBytes {
			div, u := sizeScale(int64(rate))
			fmt.Fprintf(&b, "  %.2f %s/s", float64(int64(rate))/div, u)
		}
		if total > done {
			eta := time.Duration(float64(total-done) / rate * float64(time.Second))
			b.WriteString("  ETA " + clockText(eta))
		}
	}
	return b.String()
}

// sizeScale is the unit a size of scale bytes is shown in: MiB below
// 1 GiB, GiB from there (the units of every k3ckpt table).
func sizeScale(scale int64) (float64, string) {
	if scale < 1<<30 {
		return 1 << 20, "MiB"
	}
	return 1 << 30, "GiB"
}

// clockText formats a duration as m:ss or h:mm:ss.
func clockText(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
