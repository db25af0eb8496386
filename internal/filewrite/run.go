package filewrite

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// The sizes of a run, per job: staging buffers (enough that producing a file
// never waits for the ones before), and commits waiting for the disk (enough
// that fsyncs overlap, few enough that an interrupted run has little to redo).
const (
	buffersPerJob = 4
	commitsPerJob = 4
)

// Run produces n files with at most jobs at once, in the order 0…n-1, and
// commits them on other goroutines (at most commitsPerJob × jobs at once).
// produce(ctx, job, i) writes file i using job's resources (job in [0, jobs),
// never shared by two calls at once) and returns how to commit it (nil:
// nothing to commit); on error it must leave nothing behind (File.Abort).
// The first error cancels ctx for the others and starts no further file; Run
// returns once every call has, with the first commit's error if any (the
// producers then only saw the cancellation), else the first producer's.
func Run(ctx context.Context, jobs, n int, produce func(ctx context.Context, job, i int) (commit func() error, err error)) error {
	return run(ctx, jobs, commitsPerJob, n, produce)
}

func run(ctx context.Context, jobs, commitsPerJob, n int, produce func(ctx context.Context, job, i int) (commit func() error, err error)) error {
	jobs, commitsPerJob = max(jobs, 1), max(commitsPerJob, 1)
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g, gctx := errgroup.WithContext(cctx)
	g.SetLimit(jobs)
	var commits errgroup.Group
	commits.SetLimit(commitsPerJob * jobs)
	free := make(chan int, jobs)
	for j := range jobs {
		free <- j
	}
	started := 0
	for i := range n {
		if gctx.Err() != nil {
			break
		}
		started++
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			job := <-free
			commit, err := produce(gctx, job, i)
			free <- job
			if err != nil || commit == nil {
				return err
			}
			commits.Go(func() error {
				err := commit()
				if err != nil {
					cancel(err)
				}
				return err
			})
			return nil
		})
	}
	errProduce, errCommit := g.Wait(), commits.Wait()
	if errCommit != nil {
		return errCommit
	}
	if errProduce == nil && started < n {
		errProduce = context.Cause(gctx) // cancelled before every file started
	}
	return errProduce
}
