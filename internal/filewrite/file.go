// Package filewrite is the one engine that writes output files: a File takes
// its bytes strictly in file order, hashes exactly the bytes it writes (no
// file is read back to be hashed), stages them in buffers that go to the
// disk in large writes, and appears under its final name only when
// complete and synced (temporary, fsync, rename, directory fsync). That last
// step is a Temp's, and so is every other file's the module writes
// (WriteFile, CreateTemp): there is one write path. Run drives many files at
// once, so that waiting for the disk overlaps producing the next file.
//
// Staged buffers, from a Pool shared by the files of a run, are hashed and
// written on goroutines of the file's own: the producer waits for neither
// unless every buffer is in flight. Writes go through the page cache: where
// a node has cores to spare, O_DIRECT from huge-page buffers is not worth its
// fallbacks (scripts/device/tuning16.sh measures it side by side).
package filewrite

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
)

// bufferSize is the size of a Pool's buffers: writes reach the disk in few
// calls, and a job holds several.
const bufferSize = 4 << 20

// File is an output file being written in order under a temporary name.
type File struct {
	af        *Temp
	sink      sink      // instead of af: see CreateSink
	final     string    // the name it gets on Commit (a sink's: a URL)
	h         hash.Hash // sha256; nil: not hashed
	pool      *Pool
	cur       []byte // the buffer being filled; cur[:n] is pending
	n         int
	base      int64 // file offset of cur[0]
	progress  func(int64)
	finished  bool // no more bytes: the writer has its last chunk
	aborted   bool // removed: no digest to report
	committed bool
	waited    bool  // the writer's result was taken
	werr      error // the writer's first error

	chunks  chan chunk    // to the writer
	in      chan chunk    // what the producer sends: chunks, or the hasher's queue
	hashed  chan struct{} // closed once every chunk sent has been hashed
	done    chan error    // the writer's result, once chunks is closed
	ownPool bool          // the pool is the file's own: closed once its writes stop
}

// chunk is a filled buffer on its way to the disk.
type chunk struct {
	b   []byte
	n   int
	off int64
}

// Create starts the file that Commit will put at path, staging its bytes in
// buffers of pool (nil: a pool of its own). progress, if not nil, hears every
// byte accepted.
func Create(path string, pool *Pool, progress func(int64)) (*File, error) {
	return create(path, pool, progress, true)
}

// CreateUnhashed is Create for a file whose digest nobody records: its bytes
// are not hashed (sha256 is a copy's main CPU cost), and SHA256 returns "".
func CreateUnhashed(path string, pool *Pool, progress func(int64)) (*File, error) {
	return create(path, pool, progress, false)
}

func create(path string, pool *Pool, progress func(int64), hashed bool) (*File, error) {
	af, err := CreateTemp(path)
	if err != nil {
		return nil, err
	}
	f := &File{af: af, final: path}
	return f.start(pool, progress, hashed), nil
}

// start starts the file's writer; a hashed one gets a hasher between the
// producer and the writer, so that hashing overlaps both.
func (f *File) start(pool *Pool, progress func(int64), hashed bool) *File {
	f.ownPool = pool == nil
	if f.ownPool {
		pool = newPool(2)
	}
	f.pool, f.progress = pool, progress
	f.chunks, f.hashed, f.done = make(chan chunk, cap(pool.free)), make(chan struct{}), make(chan error, 1)
	f.in = f.chunks
	if hashed {
		f.h = sha256.New()
		f.in = make(chan chunk, cap(pool.free))
		go f.hasher()
	} else {
		close(f.hashed)
	}
	go f.writer()
	return f
}

// hasher hashes the chunks in order and passes them on to the writer.
func (f *File) hasher() {
	for c := range f.in {
		f.h.Write(c.b[:c.n])
		f.chunks <- c
	}
	close(f.hashed)
	close(f.chunks)
}

// Offset is how many bytes the file has accepted: the offset of the next one.
func (f *File) Offset() int64 { return f.base + int64(f.n) }

// SHA256 is the hex sha256 of every byte the file accepted, once Finish has
// been called (it waits for the hashing); "" before Finish, after Abort, or
// for a file made by CreateUnhashed.
func (f *File) SHA256() string {
	if f.h == nil || !f.finished || f.aborted {
		return ""
	}
	<-f.hashed
	return hex.EncodeToString(f.h.Sum(nil))
}

// Write appends p to the file.
func (f *File) Write(p []byte) (int, error) {
	if f.finished {
		return 0, f.errFinished()
	}
	done := 0
	for len(p) > 0 {
		f.fill()
		c := copy(f.cur[f.n:], p)
		f.accept(c)
		p = p[c:]
		done += c
	}
	return done, nil
}

// CopyFrom appends n bytes of r starting at off, read straight into the
// staging buffer: the bytes hashed are the bytes written, whatever r does
// meanwhile.
func (f *File) CopyFrom(r io.ReaderAt, off, n int64) error {
	if f.finished {
		return f.errFinished()
	}
	for n > 0 {
		f.fill()
		c := int(min(int64(len(f.cur)-f.n), n))
		m, err := r.ReadAt(f.cur[f.n:f.n+c], off)
		if m < c {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read at %d: %w", off+int64(m), err)
		}
		f.accept(c)
		off += int64(c)
		n -= int64(c)
	}
	return nil
}

func (f *File) errFinished() error { return fmt.Errorf("write %s: %w", f.final, errFinished) }

var errFinished = errors.New("file already finished")

func (f *File) fill() {
	if f.cur == nil {
		f.cur = f.pool.get()
	}
}

// accept counts the c bytes just staged and sends the buffer off once full.
func (f *File) accept(c int) {
	f.n += c
	if f.progress != nil {
		f.progress(int64(c))
	}
	if f.n == len(f.cur) {
		f.send()
	}
}

func (f *File) send() {
	if f.cur != nil {
		f.in <- chunk{b: f.cur, n: f.n, off: f.base}
		f.base += int64(f.n)
	}
	f.cur, f.n = nil, 0
}

// writer writes the chunks in order and returns their buffers to the pool;
// after the first error it only returns buffers.
func (f *File) writer() {
	var err error
	for c := range f.chunks {
		if err == nil {
			err = f.write(c.b[:c.n], c.off)
		}
		f.pool.put(c.b)
	}
	f.done <- err
}

// write writes p at off, to the sink or the temporary file.
func (f *File) write(p []byte, off int64) error {
	var err error
	if f.sink != nil {
		_, err = f.sink.WriteAt(p, off)
	} else {
		_, err = f.af.WriteAt(p, off)
	}
	return err
}

// Chmod sets the permission bits the file will have.
func (f *File) Chmod(mode os.FileMode) error {
	if f.sink != nil {
		return nil // an object has no permission bits
	}
	return f.af.Chmod(mode)
}

// Finish hands what is pending to the writer; nothing can be written after
// it. Commit (maybe on another goroutine) waits for the disk.
func (f *File) Finish() {
	if f.finished {
		return
	}
	f.finished = true
	f.send()
	close(f.in)
}

// Commit finishes the file, waits for its writes and commits its Temp (or
// sink). On failure the temporary is removed.
func (f *File) Commit() error {
	f.Finish()
	if err := f.wait(); err != nil {
		f.abortTemp()
		return fmt.Errorf("write %s: %w", f.final, err)
	}
	var err error
	if f.sink != nil {
		err = f.sink.Commit()
	} else {
		err = f.af.Commit()
	}
	f.committed = err == nil
	return err
}

// wait waits for the writer to end and returns its first error.
func (f *File) wait() error {
	if !f.waited {
		f.waited = true
		f.werr = <-f.done
		if f.ownPool { // every buffer is back: the writer has stopped
			f.pool.Close()
		}
	}
	return f.werr
}

// Abort removes the temporary once its writes have stopped; after Commit it
// does nothing.
func (f *File) Abort() error {
	f.aborted = !f.committed
	if !f.finished {
		f.finished = true
		if f.cur != nil {
			f.pool.put(f.cur)
			f.cur = nil
		}
		close(f.in)
	}
	f.wait() // the writer must not outlive the descriptor it writes to
	if f.committed {
		return nil
	}
	return f.abortTemp()
}

// abortTemp removes the temporary, or discards the sink's upload.
func (f *File) abortTemp() error {
	if f.sink != nil {
		return f.sink.Abort()
	}
	return f.af.Abort()
}

// sink is where a File made by CreateSink puts its bytes instead of a local
// temporary: an object store's multipart upload, which no reader sees under
// its final name before Commit completes it.
type sink interface {
	// WriteAt takes the file's bytes in order (off is the count so far),
	// from one goroutine; p is reused once it returns.
	WriteAt(p []byte, off int64) (int, error)
	Commit() error // the bytes appear under the final name, whole
	Abort() error  // discards what was written; the final name is untouched
}

// CreateSink is Create for a file streamed to s, named final (a URL) in
// messages: its bytes are hashed as they go (SHA256 is the sha256 of what s
// received) and staged in pool's buffers, and Commit hands over to s.Commit
// once every byte is written.
func CreateSink(s sink, final string, pool *Pool, progress func(int64)) *File {
	return (&File{sink: s, final: final}).start(pool, progress, true)
}
