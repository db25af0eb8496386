package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// errStall cancels an attempt whose server went quiet.
var errStall = errors.New("stalled")

// pacer enforces an attempt's pace: the response header within one window
// (the stall timeout), then, in every window of the body, at least the
// minimum rate's worth of bytes (at least one; at most what the body still
// owes), so that a trickle fails as surely as a silent server.
type pacer struct {
	window    time.Duration
	rate      int64 // bytes per second, 0: none
	perWindow int64 // bytes every window needs, at least 1
	cancel    context.CancelCauseFunc
	t         *time.Timer
	r         io.Reader   // the body (see startBody)
	count     func(int64) // hears the body's bytes

	body atomic.Bool  // the response header has arrived
	got  atomic.Int64 // body bytes of the current window
	left atomic.Int64 // body bytes still owed
}

func newPacer(window time.Duration, rate int64, cancel context.CancelCauseFunc) *pacer {
	rate = max(rate, 0)
	p := &pacer{window: window, rate: rate, cancel: cancel, perWindow: max(int64(float64(rate)*window.Seconds()), 1)}
	p.t = time.AfterFunc(window, p.tick)
	return p
}

// startBody starts the windows of body r, n bytes owed, and returns the
// reader of r that counts its bytes into the pace and into count.
func (p *pacer) startBody(n int64, r io.Reader, count func(int64)) io.Reader {
	p.r, p.count = r, count
	p.left.Store(n)
	p.got.Store(0)
	p.body.Store(true)
	p.t.Reset(p.window)
	return p
}

func (p *pacer) tick() {
	if !p.body.Load() {
		p.cancel(errStall)
		return
	}
	got := p.got.Swap(0)
	need := min(p.perWindow, p.left.Load())
	switch {
	case need <= 0 || got >= need:
		p.t.Reset(p.window)
	case got == 0:
		p.cancel(errStall)
	default: // a stall too, retried and resumed; the cause says how slow
		p.cancel(fmt.Errorf("%w: %d bytes in %v, under the minimum rate of %s/s", errStall, got, p.window, rateStr(p.rate)))
	}
}

func (p *pacer) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.got.Add(int64(n))
		p.left.Add(-int64(n))
		p.count(int64(n))
	}
	return n, err
}

// readDeadline bounds one read of n bytes, its retries included, to the time
// limit plus n bytes at the minimum rate; the context's cause says so.
func (s *Source) readDeadline(ctx context.Context, name string, off, n int64) (context.Context, context.CancelFunc) {
	d := s.o.TimeLimit
	if s.o.MinRate > 0 {
		d += time.Duration(float64(n) / float64(s.o.MinRate) * float64(time.Second))
	}
	what := fmt.Sprintf("%d bytes at offset %d", n, off)
	if off < 0 {
		what = fmt.Sprintf("up to %d bytes", n)
	}
	detail := fmt.Sprintf("%s not received within %v (the time limit %v", what, d.Round(time.Millisecond), s.o.TimeLimit)
	if s.o.MinRate > 0 {
		detail += fmt.Sprintf(" plus their time at the minimum rate of %s/s", rateStr(s.o.MinRate))
	}
	return context.WithTimeoutCause(ctx, d, &Error{File: name, Kind: errTimeout, Detail: detail + ")"})
}

// rateStr writes a byte rate's count in the tool's binary units.
func rateStr(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<10) == 0:
		return fmt.Sprintf("%g MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%g KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
