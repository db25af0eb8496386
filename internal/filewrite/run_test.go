package filewrite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestRunBoundsAndJobs: at most jobs producers run at once, no two running
// producers share a job slot, every file is produced once and committed once,
// and a commit only runs after its own produce returned.
func TestRunBoundsAndJobs(t *testing.T) {
	const jobs, n = 3, 40
	var running, peak atomic.Int32
	var slots [jobs]atomic.Bool
	produced := make([]atomic.Bool, n)
	commits := make([]atomic.Int32, n)
	err := run(context.Background(), jobs, 2, n, func(ctx context.Context, job, i int) (func() error, error) {
		r := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
		}
		if job < 0 || job >= jobs || slots[job].Swap(true) {
			return nil, fmt.Errorf("job slot %d shared or out of range", job)
		}
		defer slots[job].Store(false)
		if produced[i].Swap(true) {
			return nil, fmt.Errorf("file %d produced twice", i)
		}
		if i%5 == 0 {
			return nil, nil // nothing to commit
		}
		return func() error {
			if !produced[i].Load() {
				return fmt.Errorf("file %d committed before it was produced", i)
			}
			commits[i].Add(1)
			return nil
		}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if peak.Load() > jobs {
		t.Errorf("%d producers at once, limit %d", peak.Load(), jobs)
	}
	for i := range n {
		want := int32(1)
		if i%5 == 0 {
			want = 0
		}
		if !produced[i].Load() || commits[i].Load() != want {
			t.Errorf("file %d: produced %v, committed %d times, want %d", i, produced[i].Load(), commits[i].Load(), want)
		}
	}
}

// writeFile is a produce step writing one real file through a File.
func writeFile(ctx context.Context, pool *Pool, path string, size int, fail bool) (func() error, error) {
	f, err := Create(path, pool, nil)
	if err != nil {
		return nil, err
	}
	data := pattern(size, byte(size))
	for off := 0; off < size; off += 1 << 20 {
		if err := ctx.Err(); err != nil {
			f.Abort()
			return nil, err
		}
		f.Write(data[off:min(size, off+1<<20)])
	}
	if fail {
		f.Abort()
		return nil, errors.New("produce failed")
	}
	f.Finish()
	return f.Commit, nil
}

func temporaries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var tmp []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".k3tmp-") {
			tmp = append(tmp, e.Name())
		}
	}
	return tmp
}

// TestRunProduceFailure: the first failing producer's error is returned,
// the files after it are not started, and no temporary is left; files that
// did finish are complete under their names.
func TestRunProduceFailure(t *testing.T) {
	dir := t.TempDir()
	pool := newPool(4)
	err := run(context.Background(), 2, 2, 30, func(ctx context.Context, job, i int) (func() error, error) {
		return writeFile(ctx, pool, filepath.Join(dir, fmt.Sprint(i)), bufferSize+align+i, i == 4)
	})
	if err == nil || err.Error() != "produce failed" {
		t.Fatalf("Run: %v", err)
	}
	if tmp := temporaries(t, dir); len(tmp) != 0 {
		t.Errorf("temporaries left: %v", tmp)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) >= 30 {
		t.Errorf("%d files: the failure stopped nothing", len(ents))
	}
	for _, e := range ents {
		var i int
		fmt.Sscan(e.Name(), &i)
		if fi, _ := e.Info(); fi.Size() != int64(bufferSize+align+i) {
			t.Errorf("%s: %d bytes", e.Name(), fi.Size())
		}
	}
}

// TestRunCommitFailure: a commit's error wins over the cancellation the
// producers then see, and stops the run.
func TestRunCommitFailure(t *testing.T) {
	dir := t.TempDir()
	pool := newPool(4)
	var mu sync.Mutex
	started := 0
	err := run(context.Background(), 2, 1, 50, func(ctx context.Context, job, i int) (func() error, error) {
		mu.Lock()
		started++
		mu.Unlock()
		c, err := writeFile(ctx, pool, filepath.Join(dir, fmt.Sprint(i)), bufferSize+i, false)
		if err != nil || i != 2 {
			return c, err
		}
		return func() error {
			if err := c(); err != nil {
				return err
			}
			return errors.New("commit failed")
		}, nil
	})
	if err == nil || err.Error() != "commit failed" {
		t.Fatalf("Run: %v", err)
	}
	if started == 50 {
		t.Error("every file started despite the failed commit")
	}
	if tmp := temporaries(t, dir); len(tmp) != 0 {
		t.Errorf("temporaries left: %v", tmp)
	}
}

// TestRunCancelled: cancelling the caller's context stops the run with the
// context's error and leaves no temporary.
func TestRunCancelled(t *testing.T) {
	dir := t.TempDir()
	pool := newPool(4)
	ctx, cancel := context.WithCancel(context.Background())
	err := run(ctx, 2, 2, 100, func(ctx context.Context, job, i int) (func() error, error) {
		if i == 3 {
			cancel()
		}
		return writeFile(ctx, pool, filepath.Join(dir, fmt.Sprint(i)), 2*bufferSize, false)
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if tmp := temporaries(t, dir); len(tmp) != 0 {
		t.Errorf("temporaries left: %v", tmp)
	}
	if ents, _ := os.ReadDir(dir); len(ents) >= 100 {
		t.Errorf("%d files written after the cancellation", len(ents))
	}
	// Cancelled before anything started: the error still says so.
	if err := run(ctx, 2, 2, 5, func(context.Context, int, int) (func() error, error) { return nil, nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Run on a cancelled context: %v", err)
	}
}
