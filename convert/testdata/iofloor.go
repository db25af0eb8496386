//go:build ignore

// iofloor measures what writing a conversion's bytes costs this disk with
// no computing at all: N files of SIZE bytes written in 4 MiB chunks by
// JOBS goroutines, each file fsynced, renamed and its directory synced, as
// convert commits its shards, either through the page cache (convert's
// writes) or with O_DIRECT from buffers on 2 MiB pages (-huge=false: 4 KiB
// pages), to see what a disk would give without the copy. The small
// replica's conversion writes 96 files of about 7 MiB:
//
//	go run convert/testdata/iofloor.go -dir /data/iofloor -direct
//	go run convert/testdata/iofloor.go -dir /data/iofloor -direct=false
//
// DIR is created and removed (-keep leaves it); put it on the disk measured.
// Side by side with cp -r + sync and convert:
//
//	go build -o /tmp/iofloor convert/testdata/iofloor.go
//	convert/testdata/throughput.py /data/small 5 "iofloor=/tmp/iofloor -dir DST -keep" \
//	    "convert=k3ckpt convert SRC DST --jobs 2"
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	dir := flag.String("dir", "", "scratch directory on the disk measured (created, then removed)")
	n := flag.Int("n", 96, "files")
	size := flag.Int64("size", 7<<20, "bytes per file")
	jobs := flag.Int("jobs", 2, "files written at once")
	direct := flag.Bool("direct", true, "write with O_DIRECT")
	huge := flag.Bool("huge", true, "write from buffers on 2 MiB pages, as convert does (else Go's heap, 4 KiB pages)")
	keep := flag.Bool("keep", false, "leave the files (for convert/testdata/throughput.py, which measures DST)")
	flag.Parse()
	if *dir == "" {
		log.Fatal("-dir is required")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		log.Fatal(err)
	}
	if !*keep {
		defer os.RemoveAll(*dir)
	}
	const chunk = 4 << 20
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range *jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := aligned(chunk, *huge)
			for i := range buf {
				buf[i] = byte(i * 31)
			}
			for i := range next {
				if err := writeOne(*dir, i, *size, buf, *direct); err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	for i := range *n {
		next <- i
	}
	close(next)
	wg.Wait()
	d := time.Since(start)
	total := float64(*n) * float64(*size)
	fmt.Printf("%d files × %d bytes, %d jobs, direct=%v huge=%v: %.3f s, %.0f MB/s\n", *n, *size, *jobs, *direct, *huge, d.Seconds(), total/d.Seconds()/1e6)
}

func writeOne(dir string, i int, size int64, buf []byte, direct bool) error {
	tmp := filepath.Join(dir, fmt.Sprintf(".tmp-%03d", i))
	flags := os.O_CREATE | os.O_WRONLY | os.O_EXCL
	if direct {
		flags |= syscall.O_DIRECT
	}
	f, err := os.OpenFile(tmp, flags, 0o644)
	if err != nil {
		return err
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		m := min(int64(len(buf)), size-off)
		if direct && m%4096 != 0 { // the unaligned tail goes through the page cache
			f.Close()
			if f, err = os.OpenFile(tmp, os.O_WRONLY, 0); err != nil {
				return err
			}
		}
		if _, err := f.WriteAt(buf[:m], off); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("f-%03d", i))); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// aligned returns n bytes at an address that O_DIRECT accepts: mapped on
// huge pages, or from Go's heap.
func aligned(n int, huge bool) []byte {
	if huge {
		const page = 2 << 20
		m, err := syscall.Mmap(-1, 0, n+page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			log.Fatal(err)
		}
		skip := (page - int(uintptr(unsafe.Pointer(&m[0]))%page)) % page
		b := m[skip : skip+n]
		if err := syscall.Madvise(b, 14); err != nil { // MADV_HUGEPAGE
			log.Fatal(err)
		}
		return b
	}
	b := make([]byte, n+4096)
	skip := (4096 - int(uintptr(unsafe.Pointer(&b[0]))%4096)) % 4096
	return b[skip : skip+n]
}
