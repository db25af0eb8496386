package convert

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Done records say which output files are finished, under which plan, with
// their size and sha256, so that a resumed run or merge trusts them without
// hashing them again. Each process appends JSON lines, one write per record,
// to a log of its own in StateDir/done. Logs are not synced: a record lost
// with a power failure only makes resume redo its file.
const (
	logExt        = ".jsonl"
	legacyExt     = ".json" // one record per file, as earlier versions kept them
	maxRecordLine = 64 << 10
)

// recordLog is the log a run appends its done records to.
type recordLog struct {
	mu    sync.Mutex
	path  string
	f     *os.File      // opened on the first record
	recs  records       // what was added
	state *pendingState // the plan record that must be durable first
}

// newRecordLog names the log of worker (of workers; 1 for a whole run).
func newRecordLog(dst string, worker, workers int, state *pendingState) *recordLog {
	name := "run" + logExt
	if workers > 1 {
		name = fmt.Sprintf("worker-%d-of-%d%s", worker, workers, logExt)
	}
	return &recordLog{path: filepath.Join(dst, stateDir, doneDir, name), state: state, recs: records{}}
}

// ready waits until the plan is recorded in DST: no file may reach its final
// name, nor a record the log, before then.
func (l *recordLog) ready() error { return l.state.wait() }

// add appends one record in a single write.
func (l *recordLog) add(r doneRecord) error {
	if err := l.ready(); err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		if err := l.open(); err != nil {
			return fmt.Errorf("record %s: %w", r.Name, err)
		}
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("record %s: %w", r.Name, err)
	}
	l.recs[r.Name] = r
	return nil
}

func (l *recordLog) added() records {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.recs)
}

// open opens the log; a killed run's may end in a torn line, so the first
// record starts on a line of its own.
func (l *recordLog) open() error {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s: not a regular file", l.path)
	}
	if err == nil && fi.Size() > 0 {
		var last [1]byte
		_, err = f.ReadAt(last[:], fi.Size()-1)
		if err == nil && last[0] != '\n' {
			_, err = f.Write([]byte{'\n'})
		}
	}
	if err != nil {
		f.Close()
		return err
	}
	l.f = f
	return nil
}

func (l *recordLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// records are the done records found in DST, by output file name.
type records map[string]doneRecord

// loadRecords reads every log in DST's StateDir (and legacy records). A line
// that does not parse (a torn last line) is no record.
func loadRecords(dst string) (records, error) {
	dir := filepath.Join(dst, stateDir, doneDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return records{}, nil
	}
	if err != nil {
		return nil, err
	}
	recs := records{}
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") {
			continue
		}
		switch filepath.Ext(name) {
		case logExt:
			if err := recs.readLog(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		case legacyExt:
			var r doneRecord
			if err := readJSON(filepath.Join(dir, name), &r); err == nil {
				recs[r.Name] = r
			}
		}
	}
	return recs, nil
}

func (recs records) readLog(path string) error {
	f, _, err := openRegular(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(io.LimitReader(f, maxStateFile), maxRecordLine)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Errorf("%s: a record line over %d bytes", path, maxRecordLine)
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			var r doneRecord
			if json.Unmarshal(line, &r) == nil && r.Name != "" {
				recs[r.Name] = r
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}

// finished returns the record of a unit finished under plan, from its done
// record or m, a finished conversion's manifest (or nil).
func (recs records) finished(plan, unit string, m *dstManifest) (fileRecord, bool) {
	if r, ok := recs[unit]; ok && r.Plan == plan {
		return r.fileRecord, true
	}
	if m != nil && m.Plan == plan {
		return m.lookup(unit)
	}
	return fileRecord{}, false
}

// recorded reports whether unit has a done record of plan.
func (recs records) recorded(plan, unit string) bool {
	r, ok := recs[unit]
	return ok && r.Plan == plan
}

// allDone reports whether every unit of the plan has a record.
func (recs records) allDone(p *Plan) bool {
	return !slices.ContainsFunc(p.units(), func(u unit) bool { return !recs.recorded(p.ID, u.Name) })
}
