// Command bench compares a rank export's network cost through
// internal/remote (only the byte ranges the rank needs, coalesced, in
// parallel) with curl downloading the whole checkpoint, both from one loopback
// server that limits every connection to the same rate, as a CDN does.
//
//	go run ./internal/remote/testdata/bench [-scale tiny|small] [-layout dp16] [-rank 0] [-rate 10] [-conns 16] [-k3ckpt BIN]
//
// It prints the bytes and wall time of each side and their ratios: the
// fetcher alone, then the real command (`k3ckpt export URL DST --layout L
// --ranks R`, built from ./cmd/k3ckpt unless -k3ckpt names a binary), which
// also writes the rank's files. It is a measurement script, not a test:
// nothing here asserts a speed.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/layout"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

func main() {
	scale := flag.String("scale", "tiny", "replica scale: tiny or small")
	src := flag.String("src", "", "an existing replica directory (default: synthesize one in a temporary directory)")
	lay := flag.String("layout", "dp16", "layout whose rank is exported")
	rank := flag.Int("rank", 0, "rank to export")
	rate := flag.Float64("rate", 10, "per-connection rate limit of the server, MiB/s")
	conns := flag.Int("conns", remote.DefaultConnections, "connections of the fetcher and of parallel curl")
	gap := flag.Int64("gap", 0, "coalescing gap in bytes (0: the fetcher's default, -1: touching ranges only)")
	bin := flag.String("k3ckpt", "", "k3ckpt binary for the real export (default: go build ./cmd/k3ckpt)")
	flag.Parse()
	if err := run(*scale, *src, *lay, *rank, *rate*(1<<20), *conns, *gap, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(scale, dir, layName string, rank int, rate float64, conns int, gap int64, bin string) error {
	tmp, err := os.MkdirTemp("", "k3ckpt-remote-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if dir == "" {
		var sc model.Scale
		if err := sc.Set(scale); err != nil {
			return err
		}
		dir = filepath.Join(tmp, "src")
		t := time.Now()
		if err := model.Synth(dir, model.SynthOptions{Scale: sc}); err != nil {
			return err
		}
		fmt.Printf("synth %s replica in %v\n", scale, time.Since(t).Round(time.Millisecond))
	}
	ranges, headerFiles, err := rankRanges(dir, layName, rank)
	if err != nil {
		return err
	}
	srv, base, err := serve(dir, rate)
	if err != nil {
		return err
	}
	defer srv.Close()
	var total int64
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			total += info.Size()
			names = append(names, e.Name())
		}
	}
	fmt.Printf("checkpoint: %d files, %.1f MiB; server: %.1f MiB/s per connection\n", len(names), mib(total), rate/(1<<20))

	// The remote side: index, config and every header (what opening the
	// checkpoint reads), then the rank's ranges, written out in order.
	out, err := os.Create(filepath.Join(tmp, "rank.bin"))
	if err != nil {
		return err
	}
	defer out.Close()
	t0 := time.Now()
	loc, err := remote.Resolve(base, func(string) string { return "" })
	if err != nil {
		return err
	}
	s, err := remote.NewSource(context.Background(), loc, remote.Options{Client: &http.Client{Transport: remote.NewTransport(conns)}})
	if err != nil {
		return err
	}
	ctx := context.Background()
	for _, n := range []string{safetensors.IndexName, model.ConfigName} {
		if _, err := s.ReadSmall(ctx, n, 64<<20); err != nil {
			return err
		}
	}
	if err := readHeaders(ctx, s, headerFiles, conns); err != nil {
		return err
	}
	tHeaders := time.Since(t0)
	w := bufio.NewWriterSize(out, 1<<20)
	stream := s.Stream(ctx, ranges, remote.FetchOptions{Connections: conns, Gap: gap})
	var buf []byte
	for _, r := range ranges {
		buf = slices.Grow(buf[:0], int(r.Len))[:r.Len]
		if _, err = stream.File(r.File).ReadAt(buf, r.Off); err != nil {
			break
		}
		if _, err = w.Write(buf); err != nil {
			break
		}
	}
	st, cerr := stream.Close()
	if err == nil {
		err = cerr
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return err
	}
	remoteTime := time.Since(t0)
	remoteBytes := s.Stats().Fetched
	fmt.Printf("remote fetch (%s rank %d, %d connections, gap %d): %.1f MiB needed, %.1f MiB requested in %d requests (%d ranges), %.1f MiB received in all (headers, index, config included), %v (%v of it opening: index, config, headers)\n",
		layName, rank, conns, gap, mib(st.Needed), mib(st.Requested), st.Requests, len(ranges), mib(remoteBytes), remoteTime.Round(time.Millisecond), tHeaders.Round(time.Millisecond))

	// The real command: open, plan, fetch and write the rank.
	if bin == "" {
		bin = filepath.Join(tmp, "k3ckpt")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/k3ckpt").CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/k3ckpt (run from the module root, or pass -k3ckpt): %v\n%s", err, out)
		}
	}
	t1 := time.Now()
	cmd := exec.Command(bin, "export", base, filepath.Join(tmp, "export"), "--layout", layName,
		"--ranks", strconv.Itoa(rank), "--connections", strconv.Itoa(conns), "--json")
	cmd.Stderr = os.Stderr
	outJSON, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("k3ckpt export: %v", err)
	}
	exportTime := time.Since(t1)
	var rep struct {
		Network struct {
			Needed   int64 `json:"needed_bytes"`
			Fetched  int64 `json:"fetched_bytes"`
			Total    int64 `json:"total_received_bytes"`
			Requests int64 `json:"requests"`
		} `json:"network"`
	}
	if err := json.Unmarshal(outJSON, &rep); err != nil {
		return fmt.Errorf("k3ckpt export --json: %v", err)
	}
	exportBytes := rep.Network.Total
	fmt.Printf("k3ckpt export %s --ranks %d (%d connections): %.1f MiB needed, %.1f MiB fetched for them in %d requests, %.1f MiB received in all, %v (files written)\n",
		layName, rank, conns, mib(rep.Network.Needed), mib(rep.Network.Fetched), rep.Network.Requests, mib(exportBytes), exportTime.Round(time.Millisecond))
	os.RemoveAll(filepath.Join(tmp, "export"))

	// curl: the whole checkpoint, one connection (as a plain download) and
	// conns connections at once (as a parallel downloader).
	for _, par := range []int{1, conns} {
		dst := filepath.Join(tmp, "curl"+strconv.Itoa(par))
		os.MkdirAll(dst, 0o755)
		args := []string{"-sSf", "--no-progress-meter"}
		if par > 1 {
			args = append(args, "--parallel", "--parallel-max", strconv.Itoa(par))
		}
		for _, n := range names {
			args = append(args, base+n, "-o", filepath.Join(dst, n))
		}
		t := time.Now()
		cmd := exec.Command("curl", args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("curl: %v", err)
		}
		d := time.Since(t)
		fmt.Printf("curl whole checkpoint (%d connection(s)): %.1f MiB, %v; fetcher/curl: bytes %.3f, time %.3f; k3ckpt export/curl: bytes %.3f, time %.3f\n",
			par, mib(total), d.Round(time.Millisecond), float64(remoteBytes)/float64(total), remoteTime.Seconds()/d.Seconds(),
			float64(exportBytes)/float64(total), exportTime.Seconds()/d.Seconds())
		os.RemoveAll(dst)
	}
	return nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// rankRanges lists the source byte ranges a rank's export reads, in source
// order (file, offset): whole tensors, and the contiguous runs of a slice.
func rankRanges(dir, layName string, rank int) ([]remote.Range, []string, error) {
	src, err := layout.OpenSource(dir)
	if err != nil {
		return nil, nil, err
	}
	defer src.Close()
	m, err := src.Model()
	if err != nil {
		return nil, nil, err
	}
	o, err := layout.DefaultOptions(layName)
	if err != nil {
		return nil, nil, err
	}
	l, err := layout.Resolve(layName, m, o)
	if err != nil {
		return nil, nil, err
	}
	plan, err := l.Place(src.Specs)
	if err != nil {
		return nil, nil, err
	}
	pcs, err := plan.Pieces(rank)
	if err != nil {
		return nil, nil, err
	}
	c, err := safetensors.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	var files []string
	for _, f := range c.Files {
		files = append(files, f.Path)
	}
	var rs []remote.Range
	for _, pc := range pcs {
		f, t, ok := c.Lookup(pc.Name)
		if !ok {
			return nil, nil, fmt.Errorf("tensor %s not found", pc.Name)
		}
		at := f.DataStart + t.Begin
		if pc.Held != layout.HeldSlice {
			rs = append(rs, remote.Range{File: f.Path, Off: at, Len: t.Size()})
			continue
		}
		outer, _ := safetensors.NumElements(pc.Shape[:pc.Axis])
		inner, _ := safetensors.NumElements(pc.Shape[pc.Axis+1:])
		innerB := inner * pc.DType.Bits() / 8
		rowB := pc.Shape[pc.Axis] * innerB
		for o := int64(0); o < outer; o++ {
			rs = append(rs, remote.Range{File: f.Path, Off: at + o*rowB + pc.Start*innerB, Len: (pc.Stop - pc.Start) * innerB})
		}
	}
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].File != rs[j].File {
			return rs[i].File < rs[j].File
		}
		return rs[i].Off < rs[j].Off
	})
	return rs, files, nil
}

// readHeaders reads each shard's header as the codec's Open does: the
// 8-byte length (the probe), then the JSON.
func readHeaders(ctx context.Context, s *remote.Source, files []string, conns int) error {
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	sem := make(chan struct{}, conns)
	for _, n := range files {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := func() error {
				f, err := s.Open(ctx, n)
				if err != nil {
					return err
				}
				var b [8]byte
				if _, err := f.ReadAt(b[:], 0); err != nil {
					return err
				}
				hl := int64(b[0]) | int64(b[1])<<8 | int64(b[2])<<16 | int64(b[3])<<24 | int64(b[4])<<32 | int64(b[5])<<40 | int64(b[6])<<48 | int64(b[7])<<56
				if hl <= 0 || hl > f.Size()-8 {
					return fmt.Errorf("%s: header length %d", n, hl)
				}
				_, err = f.ReadAt(make([]byte, hl), 8)
				return err
			}()
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		}()
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return *p
	}
	return nil
}

// serve starts a loopback file server whose every connection sends at most
// rate bytes per second.
func serve(dir string, rate float64) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	fsys := http.FileServer(http.Dir(dir))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if info, err := os.Stat(filepath.Join(dir, filepath.Clean("/"+r.URL.Path))); err == nil && info.Mode().IsRegular() {
			w.Header().Set("ETag", fmt.Sprintf(`"%x-%x"`, info.Size(), info.ModTime().UnixNano()))
		}
		fsys.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: h}
	go srv.Serve(&slowListener{Listener: ln, rate: rate})
	return srv, "http://" + ln.Addr().String() + "/", nil
}

type slowListener struct {
	net.Listener
	rate float64
}

func (l *slowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: c, rate: l.rate}, nil
}

// slowConn paces writes to the rate. The schedule may lag the clock by at
// most burst, so that a sleep the loaded machine overshoots is made up by the
// next writes instead of lowering the rate, while an idle connection earns no
// more than that burst.
type slowConn struct {
	net.Conn
	rate float64
	next time.Time
}

const burst = 20 * time.Millisecond

func (c *slowConn) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		n := min(len(p), 16<<10)
		now := time.Now()
		if c.next.Before(now.Add(-burst)) {
			c.next = now.Add(-burst)
		}
		c.next = c.next.Add(time.Duration(float64(n) / c.rate * float64(time.Second)))
		if d := time.Until(c.next); d > 0 {
			time.Sleep(d)
		}
		m, err := c.Conn.Write(p[:n])
		total += m
		if err != nil {
			return total, err
		}
		p = p[n:]
	}
	return total, nil
}
