package filewrite

// Pool holds the staging buffers of a run's files. A File takes one to fill
// and, once it is full, hands it to its writer and takes the next, so the
// buffers in a pool bound the bytes in flight of all its files together.
type Pool struct {
	free chan []byte
}

// NewPool makes the pool of a run of jobs files at once: buffersPerJob
// buffers per job, allocated as they are first needed.
func NewPool(jobs int) *Pool { return newPool(buffersPerJob * max(jobs, 1)) }

func newPool(n int) *Pool {
	n = max(n, 2)
	p := &Pool{free: make(chan []byte, n)}
	for range n {
		p.free <- nil
	}
	return p
}

func (p *Pool) get() []byte {
	if b := <-p.free; b != nil {
		return b
	}
	return make([]byte, bufferSize)
}

func (p *Pool) put(b []byte) { p.free <- b }

// Close lets the collector have the buffers not in use now (all of them
// after Run). The pool stays usable: a file made later gets new buffers.
func (p *Pool) Close() {
	for range len(p.free) {
		select {
		case <-p.free:
			p.free <- nil
		default:
			return
		}
	}
}
