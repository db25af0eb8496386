package filewrite

// sink is where a File made by CreateSink puts its bytes instead of a local
// temporary: an object store's multipart upload, which no reader sees under
// its final name before Commit completes it.
type sink interface {
	// WriteAt takes the file's bytes in order (off is the count so far),
	// from one goroutine; p is reused once it returns.
	WriteAt(p []byte, off int64) (int, error)
	// Commit makes the bytes appear under the final name, whole.
	Commit() error
	// Abort discards what was written; the final name is untouched.
	Abort() error
}

// CreateSink is Create for a file streamed to s, named final (a URL) in
// messages: its bytes are hashed as they go (SHA256 is the sha256 of what s
// received) and staged in pool's buffers, and Commit hands over to s.Commit
// once every byte is written.
func CreateSink(s sink, final string, pool *Pool, progress func(int64)) *File {
	return (&File{sink: s, final: final}).start(pool, progress, true)
}
