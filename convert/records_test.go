package convert

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecordLogTornLine: a log a killed run left ending in half a record
// loses only that record, and the next run's records start on a line of
// their own, so none of them is lost to the torn one.
func TestRecordLogTornLine(t *testing.T) {
	t.Parallel()
	dst := t.TempDir()
	l := newRecordLog(dst, 0, 1, nil)
	a := doneRecord{Plan: "p1", fileRecord: fileRecord{Name: "a.safetensors", Size: 1, SHA256: "aa"}}
	if err := l.add(a); err != nil {
		t.Fatal(err)
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dst, stateDir, doneDir, "run"+logExt)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"plan":"p1","name":"b.safetensors","si`) // killed mid-write
	f.Close()

	l = newRecordLog(dst, 0, 1, nil)
	c := doneRecord{Plan: "p1", fileRecord: fileRecord{Name: "c.safetensors", Size: 3, SHA256: "cc"}}
	if err := l.add(c); err != nil {
		t.Fatal(err)
	}
	l.close()
	recs, err := loadRecords(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs["a.safetensors"] != a || recs["c.safetensors"] != c {
		t.Fatalf("records %+v, want a and c only", recs)
	}
	if _, ok := recs.finished("p2", "a.safetensors", nil); ok {
		t.Error("a record of another plan counts as finished")
	}
}

// TestRecordsOfWorkersAndEarlierVersions: merge sees every worker's log and
// the one-file-per-record form earlier versions left; a later record of a
// file replaces an earlier one.
func TestRecordsOfWorkersAndEarlierVersions(t *testing.T) {
	t.Parallel()
	dst := t.TempDir()
	for w := range 2 {
		l := newRecordLog(dst, w, 2, nil)
		name := []string{"x", "y"}[w]
		if err := l.add(doneRecord{Plan: "p", fileRecord: fileRecord{Name: name, Size: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := l.add(doneRecord{Plan: "p", fileRecord: fileRecord{Name: name, Size: 2}}); err != nil {
			t.Fatal(err)
		}
		l.close()
	}
	legacy := filepath.Join(dst, stateDir, doneDir, "z.safetensors"+legacyExt)
	os.WriteFile(legacy, []byte(`{"plan":"p","name":"z","size":5,"sha256":"zz"}`+"\n"), 0o644)
	recs, err := loadRecords(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs["x"].Size != 2 || recs["y"].Size != 2 || recs["z"].SHA256 != "zz" {
		t.Fatalf("records %+v", recs)
	}
	ents, _ := os.ReadDir(filepath.Dir(legacy))
	if len(ents) != 3 {
		t.Errorf("%d entries in the done directory, want the 2 worker logs and the legacy record", len(ents))
	}
}

// TestRecordLineTooLong: a log holding a line no record can be is an error
// naming the file, not an unbounded read.
func TestRecordLineTooLong(t *testing.T) {
	t.Parallel()
	dst := t.TempDir()
	dir := filepath.Join(dst, stateDir, doneDir)
	os.MkdirAll(dir, 0o755)
	path := filepath.Join(dir, "run"+logExt)
	os.WriteFile(path, []byte(strings.Repeat("x", maxRecordLine+1)), 0o644)
	if _, err := loadRecords(dst); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("loadRecords: %v, want an error naming %s", err, path)
	}
}
