package filewrite

import (
	"runtime"
	"sync"
	"unsafe"
)

// Pool holds the staging buffers of a run's files. A File takes one to fill
// and, once it is full, hands it to its writer and takes the next, so the
// buffers in a pool bound the bytes in flight of all its files together.
type Pool struct {
	free chan []byte
	// mapped holds the buffers mapBuffer made that are still mapped, by
	// address (*byte → []byte): memory the collector neither counts nor
	// frees, unmapped by Close or once the pool is unreachable.
	mapped *sync.Map
}

// NewPool makes the pool of a run of jobs files at once: buffersPerJob
// buffers per job, aligned for direct writes (on Linux, in huge pages where
// the system has them), allocated as they are first needed.
func NewPool(jobs int) *Pool { return newPool(buffersPerJob * max(jobs, 1)) }

func newPool(n int) *Pool {
	n = max(n, 2)
	p := &Pool{free: make(chan []byte, n), mapped: &sync.Map{}}
	runtime.AddCleanup(p, func(m *sync.Map) {
		m.Range(func(_, b any) bool { unmapBuffer(b.([]byte)); return true })
	}, p.mapped)
	for range n {
		p.free <- nil
	}
	return p
}

func (p *Pool) get() []byte {
	b := <-p.free
	if b != nil {
		return b
	}
	if b = mapHuge(bufferSize); b != nil {
		p.mapped.Store(&b[0], b)
		return b
	}
	return alignedBuffer(bufferSize)
}

func (p *Pool) put(b []byte) { p.free <- b }

// directOn and mapHuge are the system's O_DIRECT switch and huge-page
// mapping; the tests replace them to take the fallbacks.
var (
	directOn = setDirect
	mapHuge  = mapBuffer
)

// Close gives back the memory of the buffers not in use now (all of them
// after Run). The pool stays usable: a file made later gets new buffers.
func (p *Pool) Close() {
	for range len(p.free) {
		select {
		case b := <-p.free:
			if _, ok := p.mapped.LoadAndDelete(unsafe.SliceData(b)); ok {
				unmapBuffer(b)
			}
			p.free <- nil
		default:
			return
		}
	}
}

// alignedBuffer returns n bytes whose address is a multiple of align (Go's
// heap does not move objects).
func alignedBuffer(n int) []byte {
	b := make([]byte, n+align)
	skip := (align - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%align)) % align
	return b[skip : skip+n : skip+n]
}
