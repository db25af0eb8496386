package main

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// rateMeter keeps the figures a display shows: bytes so far,
// the recent rate and the time left. A display polls read on its
// own ticker.
type rateMeter struct {
	total   atomic.Int64
	bytes   atomic.Int64
	retries atomic.Int64
	last    atomic.Pointer[remote.RetryEvent]

	mu       sync.Mutex
	now      func() time.Time
	start    time.Time
	sampleT  time.Time
	sampleB  int64
	rate     float64
	haveRate bool
}

// rateWindow is the shortest interval a rate sample spans; shorter polls
// reuse the previous rate instead of reporting noise.
const rateWindow = 500 * time.Millisecond

// rateWeight is the weight of a new sample in the moving average: about the
// last ten samples count.
const rateWeight = 0.2

// newRateMeter starts a meter expecting total bytes (0 when unknown). now is the
// clock (nil: time.Now).
func newRateMeter(total int64, now func() time.Time) *rateMeter {
	if now == nil {
		now = time.Now
	}
	m := &rateMeter{now: now}
	m.total.Store(total)
	m.start = now()
	m.sampleT = m.start
	return m
}

// setTotal changes the bytes expected (a plan knows it once headers are read).
func (m *rateMeter) setTotal(total int64) { m.total.Store(total) }

// fetched counts n more bytes received.
func (m *rateMeter) fetched(n int64) { m.bytes.Add(n) }

// retry counts a retried attempt.
func (m *rateMeter) retry(ev remote.RetryEvent) {
	m.retries.Add(1)
	m.last.Store(&ev)
}

// meterReading is a meter's reading.
type meterReading struct {
	// Bytes received so far and Total expected (0: unknown).
	Bytes, Total int64
	// Rate is bytes per second, averaged over the last few seconds.
	Rate float64
	// ETA is the time left at Rate; -1 when it cannot be told (no rate yet,
	// unknown total).
	ETA time.Duration
	// Elapsed is the time since the meter started.
	Elapsed time.Duration
	// Retries counts retried attempts; LastRetry is the latest (nil: none).
	Retries   int64
	LastRetry *remote.RetryEvent
}

// read reads the meter.
func (m *rateMeter) read() meterReading {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.now()
	b := m.bytes.Load()
	if dt := t.Sub(m.sampleT); dt >= rateWindow {
		inst := float64(b-m.sampleB) / dt.Seconds()
		if m.haveRate {
			m.rate += rateWeight * (inst - m.rate)
		} else {
			m.rate, m.haveRate = inst, true
		}
		m.sampleT, m.sampleB = t, b
	}
	s := meterReading{Bytes: b, Total: m.total.Load(), Rate: m.rate, ETA: -1, Elapsed: t.Sub(m.start),
		Retries: m.retries.Load(), LastRetry: m.last.Load()}
	if s.Total > 0 && m.haveRate && m.rate > 0 {
		left := max(s.Total-b, 0)
		s.ETA = time.Duration(float64(left) / m.rate * float64(time.Second))
	}
	return s
}
