package layout

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

type placement struct {
	rule   int32 // index into Layout.Rules; the weight's rule for a following scale
	stage  int32 // -1: dropped
	rank   int32 // the one global rank of an expert tensor, else -1
	weight int32 // a following scale's weight, else -1
	scale  scaleMode
	saxis  int8 // the scale axis a split of its weight maps to
}

// Placement is where every tensor of a checkpoint goes under a layout. It is pure
// header arithmetic: no tensor data is read.
type Placement struct {
	Layout     *Layout
	Tensors    []safetensors.TensorSpec // in the order given
	RankBytes  []int64                  // bytes each rank holds
	RankPieces []int                    // pieces each rank holds
	// Dropped lists the indices of tensors no rank holds; DroppedBytes is
	// their size.
	Dropped      []int
	DroppedBytes int64
	// Unaligned names the block-FP8 weights whose split cuts a 128 block;
	// their scales stay replicated over the group.
	Unaligned []string

	place  []placement
	size   []int64
	stageT [][]int32 // per stage: tensors on every rank of the stage
	rankT  [][]int32 // per rank: tensors on that rank only
}

const (
	maxListed = 20 // names an error lists
	maxErrors = 5  // per-tensor errors a failed plan reports in full
)

// nameList collects names for an error message, counting the ones left out.
type nameList struct {
	names []string
	n     int
}

func (l *nameList) add(s string) {
	if len(l.names) < maxListed {
		l.names = append(l.names, s)
	}
	l.n++
}

func (l *nameList) text() string {
	s := strings.Join(l.names, ", ")
	if l.n > len(l.names) {
		s += fmt.Sprintf(", and %d more", l.n-len(l.names))
	}
	return s
}

type matchEntry struct {
	rules []int32
	caps  captures
}

// Place places every tensor. It fails, naming the tensors, when a tensor is
// matched by no rule or by more than one, when a split does not divide, or
// when a layer or expert index is out of the layout's range. Rules by group
// read names with the layer schedule of the model the layout was built for,
// else K3's.
func (l *Layout) Place(tensors []safetensors.TensorSpec) (*Placement, error) {
	return l.place(tensors, nil)
}

// place is Place reading names with cls (nil: the layout's classifier, else
// K3's schedule). Only o_proj and g_proj depend on it: both KDA and MLA
// layers have them, and the schedule says which a layer is.
func (l *Layout) place(tensors []safetensors.TensorSpec, cls *model.Classifier) (*Placement, error) {
	if cls == nil {
		cls = l.cls
	}
	parse := model.K3Classifier().ParseName
	if cls != nil {
		parse = cls.ParseName
	}
	rules, err := l.compile()
	if err != nil {
		return nil, err
	}
	if len(tensors) > 1<<31-1 {
		return nil, fmt.Errorf("%w: %d tensors", errLayout, len(tensors))
	}
	stages, R := l.Stages(), l.RanksPerStage
	p := &Placement{
		Layout:     l,
		Tensors:    tensors,
		RankBytes:  make([]int64, stages*R),
		RankPieces: make([]int, stages*R),
		place:      make([]placement, len(tensors)),
		size:       make([]int64, len(tensors)),
		stageT:     make([][]int32, stages),
		rankT:      make([][]int32, stages*R),
	}
	layerStage := make([]int32, l.Layers)
	for s := 0; s < stages; s++ {
		a, b := l.StageLayers(s)
		for i := a; i < b && i < l.Layers; i++ {
			layerStage[i] = int32(s)
		}
	}
	cacheable, grouped := true, false
	for _, r := range rules {
		cacheable = cacheable && !r.numeric
		grouped = grouped || r.groups != 0 || r.anyLayer
	}

	// Block-FP8 weights, so their scales are recognised without a map of
	// every name.
	fp8 := map[string]int32{}
	for i, t := range tensors {
		if t.DType == safetensors.F8_E4M3 && len(t.Shape) == 2 && strings.HasSuffix(t.Name, ".weight") {
			fp8[t.Name] = int32(i)
		}
	}

	var unmatched, ambiguous, bad nameList
	var badErrs []error
	fail := func(name string, err error) {
		bad.add(name)
		if len(badErrs) < maxErrors {
			badErrs = append(badErrs, err)
		}
	}
	cache := map[string]*matchEntry{}
	var ns nameShape
	lookup := func(name string) *matchEntry {
		ns.scan(name)
		if cacheable {
			if e, ok := cache[string(ns.key)]; ok {
				return e
			}
			e := matchAll(rules, strings.Split(string(ns.key), "."))
			cache[string(ns.key)] = e
			return e
		}
		return matchAll(rules, strings.Split(name, "."))
	}

	var companions []int32
	for i, t := range tensors {
		pl := &p.place[i]
		pl.rank, pl.weight = -1, -1
		n, err := safetensors.ByteSize(t.DType, t.Shape)
		if err != nil {
			fail(t.Name, fmt.Errorf("tensor %s: %w", t.Name, err))
			continue
		}
		p.size[i] = n
		e := lookup(t.Name)
		matched := e.rules
		layer, expert := int64(-1), int64(-1)
		if len(e.rules) > 0 {
			layer, expert = capture(t.Name, e.caps.layer, &ns), capture(t.Name, e.caps.expert, &ns)
		}
		// A block-FP8 scale follows its weight rather than matching the
		// weight's group.
		w, isScale := scaleWeight(t, fp8, tensors)
		if grouped && !isScale {
			tn := parse(t.Name)
			var gm []int32
			for ri, r := range rules {
				if r.matchGroup(tn) {
					gm = append(gm, int32(ri))
				}
			}
			if len(gm) > 0 {
				if len(matched) == 0 {
					layer, expert = int64(tn.Layer), int64(tn.Expert)
				}
				matched = slices.Concat(matched, gm)
				slices.Sort(matched)
				matched = slices.Compact(matched)
			}
		}
		if len(matched) == 0 {
			if isScale {
				pl.weight = w
				companions = append(companions, int32(i))
				continue
			}
			unmatched.add(t.Name)
			continue
		}
		if len(matched) > 1 {
			var names []string
			for _, r := range matched {
				names = append(names, strconv.Quote(l.Rules[r].Name))
			}
			ambiguous.add(t.Name + " (rules " + strings.Join(names, ", ") + ")")
			continue
		}
		pl.rule = matched[0]
		if err := p.placeTensor(i, rules[pl.rule], layer, expert, layerStage); err != nil {
			fail(t.Name, err)
		}
	}
	for _, i := range companions {
		if err := p.placeScale(int(i)); err != nil {
			fail(tensors[i].Name, err)
		}
	}

	var errs []error
	if unmatched.n > 0 {
		errs = append(errs, fmt.Errorf("%w (%s): %d tensors: %s", errUnmatched, l.Name, unmatched.n, unmatched.text()))
	}
	if ambiguous.n > 0 {
		errs = append(errs, fmt.Errorf("%w (%s): %d tensors: %s", errAmbiguous, l.Name, ambiguous.n, ambiguous.text()))
	}
	errs = append(errs, badErrs...)
	if bad.n > len(badErrs) {
		errs = append(errs, fmt.Errorf("and %d more tensors with errors", bad.n-len(badErrs)))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p.account()
	return p, nil
}

func matchAll(rules []compiledRule, segs []string) *matchEntry {
	e := &matchEntry{caps: captures{-1, -1}}
	for ri, r := range rules {
		for _, pt := range r.pats {
			if c, ok := pt.match(segs); ok {
				if len(e.rules) == 0 {
					e.caps = c
				}
				e.rules = append(e.rules, int32(ri))
				break
			}
		}
	}
	return e
}

// scaleWeight reports whether t is the block scale of an FP8 weight
// (model.BlockScaleOf, model.IsBlockScaleShape), and which.
func scaleWeight(t safetensors.TensorSpec, fp8 map[string]int32, all []safetensors.TensorSpec) (int32, bool) {
	wname, ok := model.BlockScaleOf(t.Name)
	if !ok {
		return 0, false
	}
	w, ok := fp8[wname]
	if !ok {
		return 0, false
	}
	return w, model.IsBlockScaleShape(t.Shape, all[w].Shape)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func capture(name string, pos int, ns *nameShape) int64 {
	if pos < 0 {
		return -1
	}
	if pos < maxIntSegs {
		return ns.ints[pos]
	}
	segs := strings.Split(name, ".") // past the first maxIntSegs: rare
	if pos >= len(segs) {
		return -1
	}
	v, err := strconv.ParseInt(segs[pos], 10, 64)
	if err != nil {
		return -1
	}
	return v
}

func (p *Placement) placeTensor(i int, r compiledRule, layer, expert int64, layerStage []int32) error {
	l := p.Layout
	t := p.Tensors[i]
	pl := &p.place[i]
	if r.Action == drop {
		pl.stage = -1
		return nil
	}
	switch r.Stage {
	case stageFirst:
		pl.stage = 0
	case stageLast:
		pl.stage = int32(l.Stages() - 1)
	default:
		if l.Stages() > 1 {
			if layer < 0 {
				return fmt.Errorf("%w: tensor %s: rule %q places by layer, but the tensor has none", errRank, t.Name, r.Name)
			}
			if layer >= int64(l.Layers) {
				return fmt.Errorf("%w: tensor %s: layer %d is outside the layout's %d layers", errRank, t.Name, layer, l.Layers)
			}
			pl.stage = layerStage[layer]
		}
	}
	switch r.Action {
	case actSplit:
		if _, err := splitChunk(r.rule, t); err != nil {
			return err
		}
	case actExpert:
		e := expert
		if e < 0 || e >= int64(r.Experts) {
			return fmt.Errorf("%w: tensor %s: expert %d, but rule %q has %d experts", errExpert, t.Name, e, r.Name, r.Experts)
		}
		per := int64(r.Experts / l.RanksPerStage)
		pl.rank = pl.stage*int32(l.RanksPerStage) + int32(e/per)
	}
	return nil
}

func splitChunk(r *rule, t safetensors.TensorSpec) (int64, error) {
	if r.Axis >= len(t.Shape) {
		return 0, fmt.Errorf("%w: tensor %s: rule %q splits axis %d of a %d-D tensor %v", errLayout, t.Name, r.Name, r.Axis, len(t.Shape), t.Shape)
	}
	d := t.Shape[r.Axis]
	v := d
	if r.Valid > 0 {
		if r.Valid > d {
			return 0, fmt.Errorf("%w: tensor %s: rule %q keeps %d valid entries of axis %d, which has %d", errLayout, t.Name, r.Name, r.Valid, r.Axis, d)
		}
		v = r.Valid
	}
	if r.Units > 0 && v%r.Units != 0 {
		return 0, fmt.Errorf("%w: tensor %s: axis %d has %d entries, not a whole number per head for %d heads", errIndivisible, t.Name, r.Axis, v, r.Units)
	}
	if v%int64(r.Parts) != 0 {
		return 0, fmt.Errorf("%w: tensor %s: axis %d of %v has %d entries, not divisible by %d ranks", errIndivisible, t.Name, r.Axis, t.Shape, v, r.Parts)
	}
	chunk := v / int64(r.Parts)
	inner, _ := safetensors.NumElements(t.Shape[r.Axis+1:])
	// Every step along the axis must be whole bytes: slices move row by row.
	if (inner*t.DType.Bits())%8 != 0 {
		return 0, fmt.Errorf("%w: tensor %s: a step along axis %d of %s is not a whole number of bytes", errIndivisible, t.Name, r.Axis, t.DType)
	}
	return chunk, nil
}

// placeScale places a block-FP8 scale that no rule matched: it follows its weight.
func (p *Placement) placeScale(i int) error {
	pl := &p.place[i]
	w := p.place[pl.weight]
	pl.rule, pl.stage, pl.rank = w.rule, w.stage, w.rank
	pl.scale = scaleFollow
	r := &p.Layout.Rules[w.rule]
	if w.stage < 0 || r.Action != actSplit {
		return nil
	}
	wt := p.Tensors[pl.weight]
	chunk := wt.Shape[r.Axis] / int64(r.Parts)
	if r.Valid > 0 {
		chunk = r.Valid / int64(r.Parts)
	}
	pl.saxis = int8(r.Axis)
	if len(p.Tensors[i].Shape) == 4 {
		pl.saxis = int8(2 * r.Axis)
	}
	if chunk%quant.BlockSize == 0 && r.Valid == 0 {
		return nil
	}
	if r.UnalignedScale == scaleReject {
		return fmt.Errorf("%w: tensor %s: rule %q cuts %s into %d-entry slices along axis %d, not a multiple of %d", errScaleAlign, p.Tensors[i].Name, r.Name, wt.Name, chunk, r.Axis, quant.BlockSize)
	}
	pl.scale = scaleReplicated
	p.Unaligned = append(p.Unaligned, wt.Name)
	return nil
}

// account fills the per-rank totals and the per-stage/per-rank lists. A
// stage's tensor costs one step per part of its split, not per rank: local
// rank lr holds part lr % Parts, so a split's totals repeat with period Parts.
func (p *Placement) account() {
	R := p.Layout.RanksPerStage
	stages := p.Layout.Stages()
	whole := make([]int64, stages) // per stage: bytes every rank holds
	pieces := make([]int, stages)  // per stage: pieces every rank holds
	periodic := map[int][]int64{}  // per Parts: [stage*Parts + part] bytes
	for i := range p.Tensors {
		pl := &p.place[i]
		switch {
		case pl.stage < 0:
			p.Dropped = append(p.Dropped, i)
			p.DroppedBytes += p.size[i]
		case pl.rank >= 0:
			p.rankT[pl.rank] = append(p.rankT[pl.rank], int32(i))
			p.RankBytes[pl.rank] += p.size[i]
			p.RankPieces[pl.rank]++
		default:
			s := int(pl.stage)
			p.stageT[s] = append(p.stageT[s], int32(i))
			pieces[s]++
			r := &p.Layout.Rules[pl.rule]
			if r.Action != actSplit || pl.scale == scaleReplicated {
				whole[s] += p.size[i]
				continue
			}
			acc := periodic[r.Parts]
			if acc == nil {
				acc = make([]int64, stages*r.Parts)
				periodic[r.Parts] = acc
			}
			for part := 0; part < r.Parts; part++ {
				acc[s*r.Parts+part] += p.piece(i, s*R+part).Bytes
			}
		}
	}
	for rank := range p.RankBytes {
		s, lr := rank/R, rank%R
		p.RankBytes[rank] += whole[s]
		p.RankPieces[rank] += pieces[s]
		for parts, acc := range periodic {
			p.RankBytes[rank] += acc[s*parts+lr%parts]
		}
	}
	sort.Strings(p.Unaligned)
}

func (p *Placement) piece(i, rank int) piece {
	t := p.Tensors[i]
	pl := p.place[i]
	r := &p.Layout.Rules[pl.rule]
	pc := piece{Index: i, Name: t.Name, DType: t.DType, Shape: t.Shape, Rule: r.Name, Bytes: p.size[i], Scale: pl.scale}
	if pl.weight >= 0 {
		pc.ScaleOf = p.Tensors[pl.weight].Name
	}
	if pl.rank >= 0 {
		pc.Held = heldExpert
		return pc
	}
	if r.Action != actSplit || pl.scale == scaleReplicated {
		return pc
	}
	part := int64((rank % p.Layout.RanksPerStage) % r.Parts)
	axis := r.Axis
	var start, stop int64
	if pl.scale == scaleFollow {
		wt := p.Tensors[pl.weight]
		chunk := wt.Shape[r.Axis] / int64(r.Parts)
		axis = int(pl.saxis)
		start = part * chunk / quant.BlockSize
		stop = min(ceilDiv((part+1)*chunk, quant.BlockSize), t.Shape[axis])
	} else {
		chunk, _ := splitChunk(r, t)
		start, stop, pc.Valid = part*chunk, (part+1)*chunk, r.Valid
	}
	pc.Held, pc.Axis, pc.Start, pc.Stop = HeldSlice, axis, start, stop
	outer, _ := safetensors.NumElements(t.Shape[:axis])
	inner, _ := safetensors.NumElements(t.Shape[axis+1:])
	pc.Bytes = outer * (stop - start) * inner * t.DType.Bits() / 8
	return pc
}

func (p *Placement) ranks() int { return len(p.RankBytes) }

func (p *Placement) stageOf(rank int) int { return rank / p.Layout.RanksPerStage }

// Pieces lists what a rank holds, in tensor order.
func (p *Placement) Pieces(rank int) ([]piece, error) {
	if rank < 0 || rank >= p.ranks() {
		return nil, fmt.Errorf("%w: rank %d of %d", errRank, rank, p.ranks())
	}
	a, b := p.stageT[p.stageOf(rank)], p.rankT[rank]
	out := make([]piece, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		var i int32
		if len(b) == 0 || (len(a) > 0 && a[0] < b[0]) {
			i, a = a[0], a[1:]
		} else {
			i, b = b[0], b[1:]
		}
		out = append(out, p.piece(int(i), rank))
	}
	return out, nil
}
