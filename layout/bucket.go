package layout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/dirlock"
	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/objdest"
)

// A bucket DST's state directory holds the record of each output directory
// while a run writes it.
const (
	bucketStateDir   = "layout"
	bucketRecordName = "run.json"
)

// bucketRecord is the plan, every name the run writes (recorded before it
// writes any: what --restart deletes), and each object completed. A rerun
// keeps an object while HEAD gives the recorded size and ETag.
type bucketRecord struct {
	Plan  string                  `json:"plan"`
	Names []string                `json:"names"`
	Files map[string]bucketObject `json:"files"`
}

type bucketObject struct {
	Size   int64  `json:"size"`
	ETag   string `json:"etag"`
	SHA256 string `json:"sha256"`
}

type bucketDir struct {
	dirState
	obj      *objdest.Dest
	prefix   string // the directory's object names start with this ("" or "rank-00/")
	recDir   string // its folder in the state directory
	fp       string // the plan's fingerprint (see fingerprint)
	recorded bool   // rec was read from the state directory
	restart  bool   // rec is to be discarded, with the objects it names
	done     bool   // the bucket holds this plan's completion record

	mu  sync.Mutex // guards rec once writers run
	rec *bucketRecord
}

// executeBucket is Execute into an s3:// or gs:// prefix, with the
// guarantees of convert's bucket DST (objdest). A prefix holding objects no
// run of this state directory wrote is refused, but this plan's finished
// output.
func (p *Plan) executeBucket(ctx context.Context, dst string, o ExecOptions) (*result, error) {
	obj, err := objdest.Open(ctx, dst, o.StateDir, o.Connections, errOutputExists, dirlock.ErrInUse)
	if err != nil {
		return nil, err
	}
	if p.src.remote != nil {
		src, out := strings.TrimSuffix(p.src.Root, "/")+"/", obj.Bucket.URL.Dir()
		if strings.HasPrefix(src, out) || strings.HasPrefix(out, src) {
			return nil, fmt.Errorf("%w: %s and the source %s overlap: write to another prefix", errOutputExists, obj.Name, p.src.Root)
		}
	}
	if err := p.Validate(ctx); err != nil {
		return nil, err
	}
	if err := fsx.MkdirAll(obj.StateDir); err != nil {
		return nil, fmt.Errorf("state directory of %s: %w", obj.Name, err)
	}
	lock, err := dirlock.Acquire(obj.StateDir, dirlock.LockName)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	listed, err := obj.Bucket.List(ctx)
	if err != nil {
		return nil, err
	}
	present := make(map[string]int64, len(listed))
	for _, f := range listed {
		present[f.Name] = f.Size
	}
	bds := make([]*bucketDir, len(p.Dirs))
	for i := range p.Dirs {
		if bds[i], err = surveyBucketDir(p, &p.Dirs[i], obj, present, o.Restart); err != nil {
			return nil, err
		}
	}
	if err := obj.Claim(); err != nil {
		return nil, err
	}
	res := &result{}
	dirs := make([]outDir, len(bds))
	var own []string
	for i, bd := range bds {
		if err := bd.prepare(ctx, present); err != nil {
			return nil, err
		}
		for _, of := range bd.todo {
			own = append(own, bd.prefix+of.name)
		}
		dirs[i] = bd
	}
	// Create aborts each key's unfinished uploads as it starts the key;
	// those of a file whose job never starts (a failed run's) go now.
	if res.Cleaned, err = obj.AbortOwn(own); err != nil {
		return nil, err
	}
	if err := p.runJobs(ctx, o, dirs, res); err != nil {
		return nil, err
	}
	if err := obj.Unclaim(); err != nil {
		return nil, err
	}
	return res, nil
}

func (bd *bucketDir) path(of *outFile) string { return bd.obj.Path(bd.prefix + of.name) }

func (bd *bucketDir) create(of *outFile, pool *filewrite.Pool, prog func(int64)) (*filewrite.File, error) {
	return bd.obj.Create(bd.prefix+of.name, pool, prog)
}

func (bd *bucketDir) newRecord() *bucketRecord {
	return &bucketRecord{Plan: bd.fp, Names: bd.d.plannedNames(), Files: map[string]bucketObject{}}
}

// surveyBucketDir reads what the state directory and the bucket (present:
// object sizes) hold of one output directory, writing nothing, and refuses
// another plan's record (unless restart) and foreign objects.
func surveyBucketDir(p *Plan, d *dirPlan, obj *objdest.Dest, present map[string]int64, restart bool) (*bucketDir, error) {
	bd := &bucketDir{dirState: dirState{d: d}, obj: obj, prefix: objectPrefix(d.Dir),
		recDir: filepath.Join(obj.StateDir, bucketStateDir, filepath.FromSlash(d.Dir))}
	var err error
	if bd.completion, err = d.completionBytes(); err != nil {
		return nil, err
	}
	bd.fp = fingerprint(p, d, bd.completion)
	if bd.rec, err = readBucketRecord(bd.recDir); err != nil {
		return nil, err
	}
	where := obj.Path(bd.prefix)
	if bd.rec != nil {
		if bd.rec.Plan != bd.fp && !restart {
			return nil, fmt.Errorf("%w: %s holds an unfinished run of a different plan (source, layout or options changed; record %s); pass --restart to discard it", errOutputExists, where, filepath.Join(bd.recDir, bucketRecordName))
		}
		bd.recorded, bd.restart = true, restart
		return bd, nil
	}
	bd.rec = bd.newRecord()
	var there []string
	for name := range present {
		if rel, ok := strings.CutPrefix(name, bd.prefix); ok && !strings.HasPrefix(name, ".k3ckpt/") {
			there = append(there, rel)
		}
	}
	if len(there) == 0 {
		return bd, nil
	}
	slices.Sort(there)
	have, err := obj.ReadFile(bd.prefix+bd.d.completionName(), int64(len(bd.completion))+1)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if !bytes.Equal(have, bd.completion) {
		return nil, fmt.Errorf("%w: %s holds %s (and %d more objects), which no run with this state directory (%s) wrote and which is not this plan's finished output: write to another prefix, delete them, or pass the --state-dir of the run that wrote them",
			errOutputExists, where, there[0], len(there)-1, obj.StateDir)
	}
	bd.done = true
	return bd, nil
}

// prepare makes the directory ready and says what is left to write:
//   - a record of this plan: the objects still of their recorded size and
//     ETag are kept;
//   - a record to discard (restart): the objects it names are deleted;
//   - this plan's finished output: files of the planned size and header
//     that its SHA256SUMS lists are kept;
//   - else everything.
func (bd *bucketDir) prepare(ctx context.Context, present map[string]int64) error {
	d, obj := bd.d, bd.obj
	switch {
	case bd.restart:
		for _, n := range bd.rec.Names {
			if _, ok := present[bd.prefix+n]; ok {
				if err := obj.Delete(bd.prefix + n); err != nil {
					return err
				}
				delete(present, bd.prefix+n)
			}
		}
		bd.rec = bd.newRecord()
		bd.todo = d.files
	case bd.recorded:
		for _, of := range d.files {
			if r, ok := bd.rec.Files[of.name]; ok {
				kept, err := obj.Present(bd.prefix+of.name, of.lay.Size, r.ETag)
				if err != nil {
					return err
				}
				if kept && r.Size == of.lay.Size && (r.SHA256 != "" || !d.hasSums()) {
					continue
				}
				bd.changed++
				delete(bd.rec.Files, of.name)
			}
			bd.todo = append(bd.todo, of)
		}
	case bd.done:
		var listed map[string]string
		if d.hasSums() {
			listed = listedSums(obj.ReadFile(bd.prefix+sumsName, maxSumsFile))
		}
		for _, of := range d.files {
			etag, ok, err := bd.asPlanned(ctx, of, present)
			if err != nil {
				return err
			}
			if sum := listed[of.name]; ok && (sum != "" || !d.hasSums()) {
				bd.rec.Files[of.name] = bucketObject{Size: of.lay.Size, ETag: etag, SHA256: sum}
			} else {
				bd.todo = append(bd.todo, of)
			}
		}
		if len(bd.todo) == 0 && bd.sideFilesMatch() {
			bd.finished = true
			return nil
		}
		// Files go up again: the completion record goes first, so that no
		// reader takes the directory for finished meanwhile.
		if err := bd.writeRecord(); err != nil {
			return err
		}
		return obj.Delete(bd.prefix + bd.d.completionName())
	default:
		bd.todo = d.files
	}
	return bd.writeRecord()
}

func objectPrefix(dir string) string {
	if dir == "" || dir == "." {
		return ""
	}
	return path.Clean(filepath.ToSlash(dir)) + "/"
}

// asPlanned reports whether of's object has the planned size and header,
// and returns its ETag.
func (bd *bucketDir) asPlanned(ctx context.Context, of *outFile, present map[string]int64) (string, bool, error) {
	name := bd.prefix + of.name
	if size, ok := present[name]; !ok || size != of.lay.Size {
		return "", false, nil
	}
	hdr := make([]byte, len(of.lay.Header))
	n, _, etag, err := bd.obj.Bucket.Get(ctx, name, "", hdr, 0, func(int64) {})
	if err != nil {
		return "", false, err
	}
	return etag, n == len(hdr) && bytes.Equal(hdr, of.lay.Header), nil
}

// sideFilesMatch reports whether the directory's finishFiles but the
// completion record are in the bucket as planned.
func (bd *bucketDir) sideFilesMatch() bool {
	fin, err := bd.finishFiles()
	if err != nil {
		return false
	}
	for _, f := range fin[:len(fin)-1] {
		have, err := bd.obj.ReadFile(bd.prefix+f.name, int64(len(f.b))+1)
		if err != nil || !bytes.Equal(have, f.b) {
			return false
		}
	}
	return true
}

func (bd *bucketDir) finishFiles() ([]namedBytes, error) {
	files := make(map[string]string, len(bd.rec.Files))
	for n, r := range bd.rec.Files {
		files[n] = r.SHA256
	}
	return bd.d.finishFiles(bd.completion, files)
}

func readBucketRecord(dir string) (*bucketRecord, error) {
	b, err := fsx.ReadFile(filepath.Join(dir, bucketRecordName), maxStampsFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r bucketRecord
	if err := json.Unmarshal(b, &r); err != nil || r.Files == nil {
		return nil, fmt.Errorf("%w: %s: not a run record (%v): delete it and pass --restart", errOutputExists, filepath.Join(dir, bucketRecordName), err)
	}
	return &r, nil
}

// writeRecord writes the record (bd.mu held, or no writer running yet).
func (bd *bucketDir) writeRecord() error {
	b, err := json.Marshal(bd.rec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(bd.recDir, 0o755); err != nil {
		return err
	}
	return filewrite.WriteFile(filepath.Join(bd.recDir, bucketRecordName), b, 0o644)
}

func (bd *bucketDir) recordCommit(of *outFile, sum string) error {
	bd.mu.Lock()
	defer bd.mu.Unlock()
	bd.rec.Files[of.name] = bucketObject{Size: of.lay.Size, ETag: bd.obj.ETag(bd.prefix + of.name), SHA256: sum}
	return bd.writeRecord()
}

func (bd *bucketDir) finish() error {
	fin, err := bd.finishFiles()
	if err != nil {
		return err
	}
	for _, f := range fin {
		if err := bd.obj.PutBytes(bd.prefix+f.name, f.b); err != nil {
			return err
		}
	}
	bd.finished = true
	if err := os.Remove(filepath.Join(bd.recDir, bucketRecordName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
