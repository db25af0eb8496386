package inspect

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// headers is what an audit reads: side files, the shard names, and passes over
// the shard headers (streamed from a path; from memory in tests).
type headers struct {
	names   []string
	readAux func(name string) ([]byte, error)
	// walk calls fn for every shard, concurrently; a second walk may read them again.
	walk func(fn func(i int, f *safetensors.File) error) error
	// read is the header and index bytes read so far; fetched what a remote
	// source downloaded (side files included), 0 for a local one.
	read, fetched func() int64
}

// streamHeaders opens path for streaming (every walk after the first opens it
// again); transient: the audit keeps nothing of a File after its callback.
func streamHeaders(ctx context.Context, path string, transient bool) (*headers, error) {
	s, err := safetensors.OpenShards(ctx, path)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var read, fetched atomic.Int64 // of the walks done
	cur := s
	h := &headers{names: s.Names, readAux: s.ReadAux}
	h.walk = func(fn func(int, *safetensors.File) error) error {
		mu.Lock()
		w := cur
		cur = nil
		mu.Unlock()
		if w == nil {
			var err error
			if w, err = safetensors.OpenShards(ctx, path); err != nil {
				return err
			}
			if !slices.Equal(w.Names, h.names) {
				return fmt.Errorf("%s: the shards changed while it was inspected", path)
			}
		}
		err := w.Walk(ctx, transient, fn)
		r, f := w.BytesRead()
		read.Add(r)
		fetched.Add(f)
		return err
	}
	h.read, h.fetched = read.Load, fetched.Load
	return h, nil
}

// fileTotals is one file's share of the accounting, summed by one worker.
type fileTotals struct {
	fileItem
	ledger
	layers map[int]tally
	// specs and comps are the file's tensors when the audit plans.
	specs []safetensors.TensorSpec
	comps []model.Component
	// problems are the config's tensors this file does not hold as it says.
	problems []problem
}

// problem is a tensor config.json places in a shard that holds it otherwise:
// found elsewhere (where), with another shape, or nowhere.
type problem struct {
	want  safetensors.TensorSpec
	where string  // the file holding it; "" while unresolved or missing
	shape []int64 // its shape there (copied)
	found bool
}

// table reports whether the audit plans, which keeps names and shapes.
func (o Options) table() bool {
	return o.Recipe != "" || o.Experts != convert.ExpertsKeep || o.Layout != "" || o.Steps || o.By == byRank || o.By == byStage
}

// scan sums every file and checks it against what config.json places in it.
func (a *auditor) scan() ([]fileTotals, error) {
	names := a.src.names
	classify := model.K3Classifier().Classify
	var shardOf map[string]int
	var match *model.ShardMatcher
	if a.cfg != nil {
		classify = a.cfg.Classifier.Classify
		match = a.cfg.ShardMatcher()
		shardOf = make(map[string]int, a.cfg.NumShards())
		for i := range a.cfg.NumShards() {
			shardOf[a.cfg.ShardName(i)] = i
		}
	}
	table := a.opts.table()
	per := make([]fileTotals, len(names))
	err := a.src.walk(func(fi int, f *safetensors.File) error {
		ft := &per[fi]
		ft.fileItem = fileEntry(f)
		if a.opts.By == byLayer {
			ft.layers = map[int]tally{}
		}
		if table {
			ft.specs = make([]safetensors.TensorSpec, len(f.Tensors))
			ft.comps = make([]model.Component, len(f.Tensors))
		}
		var chk *shardCheck
		si, inShard := shardOf[f.Path]
		if inShard {
			chk = &shardCheck{m: match, si: si, seen: make([]bool, match.Len(si))}
		}
		for j, t := range f.Tensors {
			var c model.Component
			if g, ok := chk.match(t); ok {
				c = g.Component() // the catalog's group: what classify says of its name
			} else {
				c = classify(t.Name)
			}
			if table {
				ft.specs[j] = safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
				ft.comps[j] = c
			}
			sz := t.Size()
			ft.add(c, t.DType, sz)
			if ft.layers != nil {
				l := max(-1, model.K3Classifier().ParseName(t.Name).Layer)
				s := ft.layers[l]
				s.add(sz)
				ft.layers[l] = s
			}
		}
		if inShard && !chk.agrees() {
			ft.problems = checkShardNames(f, a.cfg.ShardTensors(si))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if table {
		a.flatten(per)
	}
	if a.cfg != nil {
		per = append(per, fileTotals{problems: a.renamedShards()})
		if err := a.resolve(per); err != nil {
			return nil, err
		}
		a.collectProblems(per)
		per = per[:len(per)-1]
	}
	return per, nil
}

// flatten joins the files' tensor tables in file order.
func (a *auditor) flatten(per []fileTotals) {
	n := 0
	for i := range per {
		n += len(per[i].specs)
	}
	a.own.specs = make([]safetensors.TensorSpec, 0, n)
	a.own.comps = make([]model.Component, 0, n)
	a.own.fileOf = make([]int32, 0, n)
	for i := range per {
		a.own.specs = append(a.own.specs, per[i].specs...)
		a.own.comps = append(a.own.comps, per[i].comps...)
		for range per[i].specs {
			a.own.fileOf = append(a.own.fileOf, int32(i))
		}
		per[i].specs, per[i].comps = nil, nil
	}
}

// shardCheck compares a file with the tensors config.json places in its shard
// as they are classified, without the catalog's names (checkShardNames' job).
type shardCheck struct {
	m       *model.ShardMatcher
	si      int
	seen    []bool // by catalog position
	found   int
	differs bool
}

// match finds t's group in the catalog, noting whether its shape differs; a
// nil check matches nothing.
func (c *shardCheck) match(t safetensors.TensorInfo) (model.Group, bool) {
	if c == nil {
		return 0, false
	}
	m, ok := c.m.Find(c.si, t.Name)
	if !ok {
		return 0, false
	}
	if !slices.Equal(t.Shape, m.Shape) {
		c.differs = true
	}
	if !c.seen[m.Pos] {
		c.seen[m.Pos] = true
		c.found++
	}
	return m.Group, true
}

// agrees reports whether the file held every catalog tensor with its shape.
func (c *shardCheck) agrees() bool { return !c.differs && c.found == len(c.seen) }

// checkShardNames lists, in the catalog's order, how a file differs from it.
func checkShardNames(f *safetensors.File, want []safetensors.TensorSpec) []problem {
	var out []problem
	for _, w := range want {
		t, ok := f.Lookup(w.Name)
		switch {
		case !ok:
			out = append(out, problem{want: w}) // looked up in the other files later
		case !slices.Equal(t.Shape, w.Shape):
			out = append(out, problem{want: w, where: f.Path, shape: slices.Clone(t.Shape), found: true})
		}
	}
	return out
}

// renamedShards lists, as unresolved problems, the tensors of the config's
// shards whose names the checkpoint does not use (renamed or re-sharded).
func (a *auditor) renamedShards() []problem {
	var out []problem
	for i := range a.cfg.NumShards() {
		if _, ok := slices.BinarySearch(a.src.names, a.cfg.ShardName(i)); ok {
			continue
		}
		for _, w := range a.cfg.ShardTensors(i) {
			out = append(out, problem{want: w})
		}
	}
	return out
}

// resolve looks up the tensors missing from their shard in one more pass, if any.
func (a *auditor) resolve(per []fileTotals) error {
	pending := map[string]*problem{}
	for i := range per {
		for j := range per[i].problems {
			if p := &per[i].problems[j]; !p.found {
				pending[p.want.Name] = p
			}
		}
	}
	if len(pending) == 0 {
		return nil
	}
	var mu sync.Mutex
	return a.src.walk(func(_ int, f *safetensors.File) error {
		for _, t := range f.Tensors {
			if p, ok := pending[t.Name]; ok { // each name is in one file only: no race
				mu.Lock()
				p.where, p.shape, p.found = f.Path, slices.Clone(t.Shape), true
				mu.Unlock()
			}
		}
		return nil
	})
}

// collectProblems turns the findings into warnings: each file's shape
// differences (maxListedWarnings spelled out), then the missing tensors.
func (a *auditor) collectProblems(per []fileTotals) {
	missing, firstMiss := 0, ""
	for i := range per {
		listed := 0
		for _, p := range per[i].problems {
			switch {
			case !p.found:
				if missing == 0 {
					firstMiss = p.want.Name
				}
				missing++
			case !slices.Equal(p.shape, p.want.Shape): // found elsewhere, with another shape
				s := fmt.Sprintf("file %s: tensor %s: shape %v, config.json implies %v", p.where, p.want.Name, p.shape, p.want.Shape)
				if a.warn.shape == 0 {
					a.warn.firstShape = s
				}
				a.warn.shape++
				if listed < maxListedWarnings {
					a.warn.add(s)
					listed++
				} else {
					a.warn.more++
				}
			}
		}
	}
	if missing > 0 {
		a.warn.add(fmt.Sprintf("%d tensors that config.json implies are not in the checkpoint (first: %s)", missing, firstMiss))
	}
}
