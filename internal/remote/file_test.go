package remote

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// hub is a hub-like origin: it checks the bearer token, reports a commit,
// and 302-redirects every file to a CDN on another host (another port of
// 127.0.0.1: another origin), which refuses any Authorization header.
type hubPair struct {
	hub, cdn  *httptest.Server
	files     *fileServer // serves the CDN's content
	mu        sync.Mutex
	hubAuth   []string
	hubHits   int
	cdnAuthed int
	commit    string
}

func newHubPair(t *testing.T, token string, files map[string][]byte) *hubPair {
	hp := &hubPair{commit: "c0ffee"}
	hp.files = newFileServer(t, files)
	hp.cdn = hp.files.srv
	hp.files.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		if r.Header.Get("Authorization") != "" {
			hp.mu.Lock()
			hp.cdnAuthed++
			hp.mu.Unlock()
			http.Error(w, "no tokens here", http.StatusBadRequest)
			return true
		}
		return false
	}
	hp.hub = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hp.mu.Lock()
		hp.hubHits++
		hp.hubAuth = append(hp.hubAuth, r.Header.Get("Authorization"))
		commit := hp.commit
		hp.mu.Unlock()
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "gated repo", http.StatusUnauthorized)
			return
		}
		// /org/name/resolve/main/FILE → CDN /repo/FILE
		_, file, ok := strings.Cut(r.URL.Path, "/resolve/main/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("X-Repo-Commit", commit)
		http.Redirect(w, r, hp.cdn.URL+"/repo/"+file+"?sig=abc", http.StatusFound)
	}))
	t.Cleanup(hp.hub.Close)
	return hp
}

func (hp *hubPair) source(t *testing.T, token string, o Options) *Source {
	t.Helper()
	env := mapEnv(map[string]string{"HOME": t.TempDir(), "HF_ENDPOINT": hp.hub.URL, "HF_TOKEN": token})
	loc, err := Resolve("hf://org/name", env)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSource(context.Background(), loc, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRedirectKeepsTokenOnOrigin(t *testing.T) {
	data := pattern(300_000, 1)
	hp := newHubPair(t, "secret", map[string][]byte{"model.safetensors": data, "config.json": []byte(`{"a":1}`)})
	s := hp.source(t, "secret", fastOptions())
	f, err := s.Open(context.Background(), "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if f.Size() != int64(len(data)) || f.etag != `"v1-model.safetensors"` {
		t.Fatalf("size %d etag %q", f.Size(), f.etag)
	}
	buf := make([]byte, 1000)
	for _, off := range []int64{0, 5, 299_000} {
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, data[off:off+1000]) {
			t.Fatalf("bytes at %d differ", off)
		}
	}
	b, err := s.ReadSmall(context.Background(), "config.json", 1<<20)
	if err != nil || string(b) != `{"a":1}` {
		t.Fatalf("config: %q %v", b, err)
	}
	hp.mu.Lock()
	defer hp.mu.Unlock()
	if hp.cdnAuthed != 0 {
		t.Errorf("the CDN received the token %d times", hp.cdnAuthed)
	}
	for i, a := range hp.hubAuth {
		if a != "Bearer secret" {
			t.Errorf("hub request %d: Authorization %q", i, a)
		}
	}
	// The probe and config.json go through the hub; the ranged reads reuse
	// the CDN address the probe was redirected to.
	if hp.hubHits != 2 {
		t.Errorf("hub saw %d requests, want 2 (probe, config.json)", hp.hubHits)
	}
	if s.repoCommit() != "c0ffee" {
		t.Errorf("commit %q", s.repoCommit())
	}
}

func TestGatedWithoutToken(t *testing.T) {
	hp := newHubPair(t, "secret", map[string][]byte{"a": pattern(10, 0)})
	_, err := hp.source(t, "", fastOptions()).Open(context.Background(), "a")
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "no token was sent") {
		t.Fatalf("got %v", err)
	}
	_, err = hp.source(t, "wrong", fastOptions()).Open(context.Background(), "a")
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("got %v", err)
	}
}

// A CDN's signed URL expires: a refusal from the cached redirect target sends
// the next request to the origin again, which hands out a fresh one.
func TestExpiredRedirectTarget(t *testing.T) {
	data := pattern(10_000, 2)
	hp := newHubPair(t, "", map[string][]byte{"a": data})
	inner := hp.files.hook
	hp.files.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		if n == 2 { // the first read after the probe: expired
			http.Error(w, "expired", http.StatusForbidden)
			return true
		}
		return inner(w, r, name, n)
	}
	s := hp.source(t, "", fastOptions())
	f, err := s.Open(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	if _, err := f.ReadAt(buf, 500); err != nil || !bytes.Equal(buf, data[500:600]) {
		t.Fatalf("read: %v", err)
	}
	hp.mu.Lock()
	defer hp.mu.Unlock()
	if hp.hubHits != 2 {
		t.Errorf("hub saw %d requests, want 2 (probe, re-resolve)", hp.hubHits)
	}
}

// The hub reports another commit for the branch: it moved during the run.
func TestRevisionMoved(t *testing.T) {
	hp := newHubPair(t, "", map[string][]byte{"a": pattern(100, 0), "b": pattern(100, 1)})
	s := hp.source(t, "", fastOptions())
	if _, err := s.Open(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	hp.mu.Lock()
	hp.commit = "beef"
	hp.mu.Unlock()
	_, err := s.Open(context.Background(), "b")
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "c0ffee") || !strings.Contains(err.Error(), "beef") {
		t.Fatalf("got %v", err)
	}
}

// A connection dropped mid-body is resumed at the first byte not received:
// the retry's Range starts exactly there, and nothing is fetched twice.
func TestResumeAfterDrop(t *testing.T) {
	data := pattern(1<<20, 3)
	fs := newFileServer(t, map[string][]byte{"a": data})
	const cut = 100_000
	fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		if n != 2 && n != 3 { // drop the first two data requests midway
			return false
		}
		a, b, _ := parseTestRange(r.Header.Get("Range"), int64(len(data)))
		w.Header().Set("ETag", fs.etags[name])
		w.Header().Set("Content-Range", "bytes "+itoa(a)+"-"+itoa(b)+"/"+itoa(int64(len(data))))
		w.Header().Set("Content-Length", itoa(b-a+1))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(data[a : a+cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // closes the connection mid-body
	}
	rec := &recorder{}
	o := fastOptions()
	o.Progress = rec
	s := newTestSource(t, fs.url(), o)
	f, err := s.Open(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	const off = 1000
	buf := make([]byte, 500_000)
	if _, err := f.ReadAt(buf, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data[off:off+len(buf)]) {
		t.Fatal("resumed bytes differ")
	}
	log := fs.requests()
	if len(log) != 4 {
		t.Fatalf("%d requests, want 4: %+v", len(log), log)
	}
	want := []int64{0, off, off + cut, off + 2*cut}
	for i, e := range log {
		if got := rangeStart(t, e.rng); got != want[i] {
			t.Errorf("request %d starts at %d, want %d", i+1, got, want[i])
		}
	}
	if len(rec.retries) != 2 || rec.retries[0].Resume != off+cut || !errors.Is(rec.retries[0].Err, ErrNetwork) {
		t.Errorf("retries %+v", rec.retries)
	}
	if got := s.Stats().Fetched; got != probeLen+int64(len(buf)) {
		t.Errorf("received %d bytes, want %d: nothing fetched twice", got, probeLen+len(buf))
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// 429 and 503 with Retry-After (seconds, then an HTTP-date) are retried;
// the wait honours Retry-After up to RetryMax (1 ms here, so the test does
// not sleep for seconds) even though the backoff alone would be shorter.
func TestRetryAfter(t *testing.T) {
	data := pattern(4096, 4)
	fs := newFileServer(t, map[string][]byte{"a": data})
	fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		switch n {
		case 1:
			w.Header().Set("Retry-After", "7")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return true
		case 2:
			w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	rec := &recorder{}
	o := fastOptions()
	o.RetryBase, o.RetryMax, o.Progress = time.Nanosecond, time.Millisecond, rec
	s := newTestSource(t, fs.url(), o)
	f, err := s.Open(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if f.Size() != 4096 || len(rec.retries) != 2 {
		t.Fatalf("size %d, retries %+v", f.Size(), rec.retries)
	}
	for i, st := range []int{429, 503} {
		ev := rec.retries[i]
		var e *Error
		if !errors.As(ev.Err, &e) || e.Status != st || ev.Wait != time.Millisecond {
			t.Errorf("retry %d: %+v (want status %d, wait 1ms = Retry-After capped)", i, ev, st)
		}
	}
	if s.Stats().Retries != 2 {
		t.Errorf("stats %+v", s.Stats())
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := map[string]time.Duration{
		"":                              0,
		"120":                           120 * time.Second,
		"0":                             0,
		"-5":                            0,
		"soon":                          0,
		"Fri, 02 Jan 2026 03:05:05 GMT": time.Minute,
		"Fri, 02 Jan 2026 03:00:00 GMT": 0, // in the past
	}
	for v, want := range cases {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}

func TestBackoffBounds(t *testing.T) {
	for n := 1; n < 40; n++ {
		d := backoff(n, time.Second, 30*time.Second, 0)
		lo := min(time.Second<<(n-1), 30*time.Second) / 2
		if n > 6 {
			lo = 15 * time.Second
		}
		if d < lo || d > 30*time.Second {
			t.Errorf("retry %d: %v outside [%v, 30s]", n, d, lo)
		}
	}
	if d := backoff(1, time.Millisecond, time.Minute, 10*time.Second); d != 10*time.Second {
		t.Errorf("Retry-After not honoured: %v", d)
	}
}

// Every failure says what happened, with the status and the host.
func TestErrorsSayWhat(t *testing.T) {
	data := pattern(1000, 5)
	fs := newFileServer(t, map[string][]byte{"a": data})
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		switch name {
		case "500":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "loop":
			http.Redirect(w, r, "/repo/loop2", http.StatusFound)
		case "loop2":
			http.Redirect(w, r, "/repo/loop", http.StatusTemporaryRedirect)
		case "hang":
			select {
			case <-block:
			case <-r.Context().Done():
			}
		case "norange":
			w.WriteHeader(http.StatusOK)
			w.Write(data)
		case "badcr":
			w.Header().Set("Content-Range", "bytes 1-8/1000")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[1:9])
		case "badlen":
			w.Header().Set("Content-Range", "bytes 0-7/1000")
			w.Header().Set("Content-Length", "9")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[:9])
		default:
			return false
		}
		return true
	}
	o := fastOptions()
	o.Retries = 2
	s := newTestSource(t, fs.url(), o)
	quick := o
	quick.StallTimeout = 20 * time.Millisecond // only the hanging server meets it
	sq := newTestSource(t, fs.url(), quick)
	host := strings.TrimPrefix(fs.srv.URL, "http://")
	cases := []struct {
		name string
		kind error
		says []string
	}{
		{"missing", ErrNotFound, []string{"missing", "HTTP 404", host}},
		{"500", ErrStatus, []string{"HTTP 500", host, "after 3 attempts"}},
		{"loop", errRedirect, []string{"redirect loop"}},
		{"hang", errTimeout, []string{"no data for 20ms", host, "after 3 attempts"}},
		{"norange", ErrProtocol, []string{"ignored the Range header"}},
		{"badcr", ErrProtocol, []string{"Content-Range"}},
		{"badlen", ErrProtocol, []string{"Content-Length 9"}},
	}
	for _, c := range cases {
		src := s
		if c.name == "hang" {
			src = sq
		}
		_, err := src.Open(context.Background(), c.name)
		if !errors.Is(err, c.kind) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.kind)
			continue
		}
		for _, w := range c.says {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
	}
	// Connection refused: a server that is gone.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	_, err := newTestSource(t, gone.URL+"/", o).Open(context.Background(), "a")
	if !errors.Is(err, ErrNetwork) || !strings.Contains(err.Error(), "connection refused") || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("refused: %v", err)
	}
	// A host never reached is a wrong location, not a passing failure: one
	// attempt, not a minute of retries.
	if e := (*Error)(nil); !errors.As(err, &e) || e.Attempts > 1 {
		t.Errorf("refused before any answer: %v, want no retry", err)
	}
	// Too many redirects.
	chain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path+"x", http.StatusFound)
	}))
	defer chain.Close()
	_, err = newTestSource(t, chain.URL+"/", o).Open(context.Background(), "a")
	if !errors.Is(err, errRedirect) || !strings.Contains(err.Error(), "more than 10 redirects") {
		t.Errorf("redirects: %v", err)
	}
}

// A file that changes between requests (new ETag, or new size) fails the
// read with ErrChanged naming the file; nothing is retried.
func TestFileChangedUnderUs(t *testing.T) {
	data := pattern(10_000, 6)
	fs := newFileServer(t, map[string][]byte{"a": data, "b": data})
	s := newTestSource(t, fs.url(), fastOptions())
	fa, err := s.Open(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	fb, err := s.Open(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	fs.set("a", pattern(10_000, 7), `"v2"`)
	fs.set("b", pattern(12_000, 6), fs.etags["b"])
	buf := make([]byte, 100)
	_, err = fa.ReadAt(buf, 100)
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "remote a:") || !strings.Contains(err.Error(), `"v2"`) {
		t.Errorf("etag: %v", err)
	}
	_, err = fb.ReadAt(buf, 100)
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "remote b:") || !strings.Contains(err.Error(), "12000") {
		t.Errorf("size: %v", err)
	}
	// Shrunk below the range: 416.
	fs.set("b", pattern(50, 6), fs.etags["b"])
	_, err = fb.ReadAt(buf, 5000)
	if !errors.Is(err, ErrChanged) {
		t.Errorf("shrunk: %v", err)
	}
	if n := s.Stats().Retries; n != 0 {
		t.Errorf("%d retries of a changed file", n)
	}
}

func TestReadAtEdges(t *testing.T) {
	data := pattern(100, 8)
	fs := newFileServer(t, map[string][]byte{"a": data, "empty": {}, "tiny": data[:3]})
	s := newTestSource(t, fs.url(), fastOptions())
	f, _ := s.Open(context.Background(), "a")
	buf := make([]byte, 30)
	n, err := f.ReadAt(buf, 90)
	if n != 10 || err == nil || !bytes.Equal(buf[:10], data[90:]) {
		t.Errorf("tail: %d %v", n, err)
	}
	if _, err := f.ReadAt(buf, 100); err == nil {
		t.Error("read at the end succeeded")
	}
	before := len(fs.requests())
	if _, err := f.ReadAt(buf[:8], 0); err != nil || !bytes.Equal(buf[:8], data[:8]) || len(fs.requests()) != before {
		t.Errorf("the probed prefix cost a request or differs: %v", err)
	}
	for name, size := range map[string]int64{"empty": 0, "tiny": 3} {
		g, err := s.Open(context.Background(), name)
		if err != nil || g.Size() != size {
			t.Errorf("%s: %v", name, err)
		}
	}
	if g, _ := s.Open(context.Background(), "tiny"); g != nil {
		if _, err := g.ReadAt(buf[:3], 0); err != nil || !bytes.Equal(buf[:3], data[:3]) {
			t.Errorf("tiny: %v", err)
		}
	}
}

func TestReadSmall(t *testing.T) {
	fs := newFileServer(t, map[string][]byte{"config.json": []byte("0123456789")})
	s := newTestSource(t, fs.url(), fastOptions())
	if b, err := s.ReadSmall(context.Background(), "config.json", 10); err != nil || string(b) != "0123456789" {
		t.Errorf("%q %v", b, err)
	}
	if _, err := s.ReadSmall(context.Background(), "config.json", 9); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("limit: %v", err)
	}
	if _, err := s.ReadSmall(context.Background(), "nope.json", 9); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
}

// TestRefusedAfterAnswerRetried: once a server has answered, a refused
// connection is a restart in progress, retried until the server is back.
func TestRefusedAfterAnswerRetried(t *testing.T) {
	data := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	serve := func(l net.Listener) *httptest.Server {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", `"e"`)
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
		}))
		srv.Listener.Close()
		srv.Listener = l
		srv.Start()
		return srv
	}
	first := serve(l)
	var restarted *httptest.Server
	var restartErr error
	o := fastOptions()
	o.Retries = 3
	o.Progress = progressFunc(func(RetryEvent) {
		if restarted != nil || restartErr != nil {
			return
		}
		l2, err := net.Listen("tcp", addr)
		if err != nil {
			restartErr = err
			return
		}
		restarted = serve(l2)
	})
	s := newTestSource(t, "http://"+addr+"/", o)
	f, err := s.Open(context.Background(), "f")
	if err != nil {
		t.Fatal(err)
	}
	first.Close() // the server goes away: connections are refused
	p := make([]byte, 10)
	_, err = f.ReadAt(p, 20)
	if restarted != nil {
		defer restarted.Close()
	}
	if restartErr != nil {
		t.Skipf("could not listen on %s again: %v", addr, restartErr)
	}
	if err != nil || string(p) != string(data[20:30]) {
		t.Fatalf("read after restart: %q, %v", p, err)
	}
	if s.Stats().Retries < 1 {
		t.Fatalf("no retry recorded")
	}
}

type progressFunc func(RetryEvent)

func (progressFunc) Fetched(int64)        {}
func (f progressFunc) Retry(e RetryEvent) { f(e) }
