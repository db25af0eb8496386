package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/layout"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// connectionsFlag registers the remote-transfer flags of a command that
// reads a source: --connections, --min-rate and --time-limit.
func connectionsFlag(f *pflag.FlagSet, p *int) {
	f.IntVar(p, "connections", remote.DefaultConnections, "parallel range requests to an https:// or hf:// source (shared by the files written at once)")
	f.String("min-rate", "16KiB", "least throughput per second of each range request to an https:// or hf:// source, measured over every minute of it; a slower request is retried from where it stopped (0: none)")
	f.Duration("time-limit", remote.DefaultTimeLimit, "a range request to an https:// or hf:// source, its retries included, fails after this long plus its bytes' time at --min-rate")
}

// transferOptions reads --min-rate and --time-limit.
func transferOptions(cmd *cobra.Command, o *remote.Options) error {
	fl := cmd.Flags()
	if v, err := fl.GetString("min-rate"); err == nil && (v == "0" || v == "0B") {
		o.MinRate = -1
	} else if err == nil {
		if o.MinRate, err = parseSize(v); err != nil {
			return fmt.Errorf("--min-rate: %w", err)
		}
	}
	if d, err := fl.GetDuration("time-limit"); err == nil {
		if d <= 0 {
			return fmt.Errorf("--time-limit %v: want a positive duration (e.g. 10m)", d)
		}
		o.TimeLimit = d
	}
	return nil
}

// netMeter counts a remote source's traffic for the progress display and
// the final report; nil for a local source.
type netMeter struct {
	start     time.Time
	total     atomic.Int64
	bytes     atomic.Int64
	retryN    atomic.Int64
	lastRetry atomic.Pointer[remote.RetryEvent]
	bar       atomic.Pointer[progressBar]
	log       chan struct{} // closed to stop the -v progress lines (nil: none)
	logged    sync.WaitGroup
}

// netLogEvery is how often -v prints a progress line off a terminal.
const netLogEvery = 30 * time.Second

// startLog prints the meter's reading (the bar's text and the retries so
// far) to w every period until done: the progress of a long transfer in a
// log file or a batch job's output.
func (nm *netMeter) startLog(w io.Writer, label string, every time.Duration) {
	nm.log = make(chan struct{})
	nm.logged.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-nm.log:
				return
			case <-t.C:
			}
			line := progressLine(label, unitBytes, nm.bytes.Load(), nm.total.Load(), time.Since(nm.start))
			if n := nm.retryN.Load(); n > 0 {
				line += fmt.Sprintf("  %d retries", n)
				if ev := nm.lastRetry.Load(); ev != nil {
					line += fmt.Sprintf(" (last: %v)", ev.Err)
				}
			}
			fmt.Fprintln(w, line)
		}
	})
}

// Fetched implements remote.Progress: the meter counts, the bar draws.
func (nm *netMeter) Fetched(n int64) {
	nm.bytes.Add(n)
	nm.bar.Load().Add(n)
}

// Retry implements remote.Progress.
func (nm *netMeter) Retry(ev remote.RetryEvent) {
	nm.retryN.Add(1)
	nm.lastRetry.Store(&ev)
}

// openSource opens a checkpoint; a remote one gets a transport for conns
// parallel requests, the command's transfer bounds and a meter.
func openSource(cmd *cobra.Command, path string, conns int) (*safetensors.Checkpoint, *netMeter, error) {
	ctx := context.Background()
	if conns < 1 || conns > 1024 {
		return nil, nil, fmt.Errorf("--connections %d: want 1 to 1024", conns)
	}
	o := remote.Options{Client: &http.Client{Transport: remote.NewTransport(conns)}}
	if err := transferOptions(cmd, &o); err != nil {
		return nil, nil, err
	}
	if !remote.IsRemote(path) {
		c, err := safetensors.OpenWith(ctx, path, safetensors.OpenOptions{})
		return c, nil, err
	}
	nm := &netMeter{start: time.Now()}
	o.Progress = nm
	o.Warn = func(msg string) { warn(cmd, "%s", msg) }
	c, err := safetensors.OpenWith(ctx, path, safetensors.OpenOptions{Remote: o, Connections: conns})
	if err != nil {
		return nil, nil, err
	}
	if c.Remote == nil { // an hf:// reference served from the offline cache
		nm = nil
	}
	return c, nm, nil
}

// openLayoutSource opens the SRC of shard and export: a remote checkpoint
// through openSource, anything else (an export directory too) locally.
func openLayoutSource(cmd *cobra.Command, path string, conns int) (*layout.Source, *netMeter, error) {
	if !remote.IsRemote(path) {
		s, err := layout.OpenSource(path)
		return s, nil, err
	}
	c, nm, err := openSource(cmd, path, conns)
	if err != nil {
		return nil, nil, err
	}
	s, err := layout.OpenCheckpoint(c)
	if err != nil {
		return nil, nil, err
	}
	s.Root = path
	if s.AuxUnlisted {
		warn(cmd, "%s cannot be listed over https://: side files other than config.json (tokenizer, code) are not copied; use hf://org/name to get them", path)
	}
	return s, nm, nil
}

// startProgress starts a run's progress display: for a remote source (nm not
// nil) the bytes received of total, as a bar or -v's log lines; else a bar
// labelled label, returned for the executor to start. stop ends either.
func (nm *netMeter) startProgress(cmd *cobra.Command, asJSON bool, label string, total int64) (bar *progressBar, stop func()) {
	if nm == nil {
		bar = newProgress(cmd, asJSON, label, unitBytes)
		return bar, bar.finish
	}
	nm.total.Store(total)
	const netLabel = "network (received)"
	b := newProgress(cmd, asJSON, netLabel, unitBytes)
	b.Start(total)
	nm.bar.Store(b)
	if b == nil && !asJSON && verbose(cmd) {
		nm.startLog(cmd.ErrOrStderr(), netLabel, netLogEvery)
	}
	return nil, nm.done
}

func (nm *netMeter) done() {
	nm.bar.Swap(nil).finish()
	if nm.log != nil {
		close(nm.log)
		nm.logged.Wait()
		nm.log = nil
	}
}

// netReport is the network figures a command prints; Total includes the
// headers, index and side files.
type netReport struct {
	Needed   int64 `json:"needed_bytes"`
	Fetched  int64 `json:"fetched_bytes"`
	Total    int64 `json:"total_received_bytes"`
	Requests int64 `json:"requests"`
	Retries  int64 `json:"retries"`
}

// report is a finished run's network figures from the executor's stats n
// (nil for a local source) and total, everything the source received.
func (nm *netMeter) report(n *remote.Stats, total int64) *netReport {
	if n == nil {
		return nil
	}
	r := &netReport{Needed: n.Needed, Fetched: n.Fetched, Total: total, Requests: n.Requests}
	if nm != nil {
		r.Retries = nm.retryN.Load()
	}
	return r
}

// received is every byte the source received (0 for a local one).
func (nm *netMeter) received() int64 {
	if nm == nil {
		return 0
	}
	return nm.bytes.Load()
}

// print writes the figures' line; a nil report prints nothing.
func (r *netReport) print(w io.Writer) {
	if r == nil {
		return
	}
	ratio := 0.0
	if r.Needed > 0 {
		ratio = float64(r.Fetched) / float64(r.Needed)
	}
	fmt.Fprintf(w, "network: %s needed, %s fetched for them (×%.3f), %s received in all, %d range requests, %d retries\n",
		sizeStr(r.Needed), sizeStr(r.Fetched), ratio, sizeStr(r.Total), r.Requests, r.Retries)
}

func sizeStr(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
}
