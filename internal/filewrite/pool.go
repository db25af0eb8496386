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
	free   chan []byte
	mapped *mappedBuffers // buffers mapped outside the heap, released with the pool
}

// mappedBuffers are a pool's buffers that mapBuffer made and that are still
// mapped, by address: memory the collector neither counts nor frees.
type mappedBuffers struct {
	mu   sync.Mutex
	bufs map[*byte][]byte
}

func (m *mappedBuffers) add(b []byte) {
	m.mu.Lock()
	m.bufs[&b[0]] = b
	m.mu.Unlock()
}

func (m *mappedBuffers) unmap(b []byte) {
	if len(b) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.bufs[&b[0]]; ok {
		delete(m.bufs, &b[0])
		unmapBuffer(b)
	}
}

// release unmaps them all once the pool, and so every file that used its
// buffers, is unreachable.
func (m *mappedBuffers) release() {
	for _, b := range m.bufs {
		unmapBuffer(b)
	}
}

// NewPool makes the pool of a run of jobs files at once: 4 buffers per job
// of bufferSize bytes, aligned for direct writes (and, on Linux, backed by
// huge pages where the system has them: see mapBuffer). Buffers are
// allocated as they are first needed.
func NewPool(jobs int) *Pool { return newPool(buffersPerJob * max(jobs, 1)) }

func newPool(n int) *Pool {
	n = max(n, 2)
	p := &Pool{free: make(chan []byte, n), mapped: &mappedBuffers{bufs: map[*byte][]byte{}}}
	runtime.AddCleanup(p, (*mappedBuffers).release, p.mapped)
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
		p.mapped.add(b)
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

// Close gives back the memory of the buffers not in use now: all of them
// once no file of the pool is being written (as after Run). The pool stays
// usable: a file made later gets new buffers.
func (p *Pool) Close() {
	for range len(p.free) {
		select {
		case b := <-p.free:
			p.mapped.unmap(b)
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
