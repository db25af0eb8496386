package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// filesRule is a checked filesFile.
type filesRule struct {
	maxElements int64
	stages      []filesStage
}

type filesStage struct {
	takes []filesTake
	files int
}

// filesTake is one take of a stage: a model-level group (layers nil) or
// layers [a, b] (only: name prefixes after the layer prefix, nil for all).
// A take skips the tensors an earlier take has.
type filesTake struct {
	group  Group
	layers *[2]int
	only   []string
}

func loadFiles(f *filesFile, group func(where, name string) (Group, error)) (*filesRule, error) {
	if f.MaxElements <= 0 {
		return nil, fmt.Errorf("max_elements must be positive")
	}
	r := &filesRule{maxElements: f.MaxElements}
	for i, st := range f.Stages {
		where := fmt.Sprintf("files.stages[%d]", i)
		if st.Files <= 0 || len(st.Take) == 0 {
			return nil, fmt.Errorf("%s: a stage takes something into at least one file", where)
		}
		s := filesStage{files: st.Files}
		for j, t := range st.Take {
			var ft filesTake
			switch {
			case (t.Group == "") == (t.Layers == nil):
				return nil, fmt.Errorf("%s.take[%d]: give a group or layers, not both", where, j)
			case t.Layers != nil:
				if t.Layers[0] < 0 || t.Layers[1] < t.Layers[0] {
					return nil, fmt.Errorf("%s.take[%d]: layers %v are no range", where, j, *t.Layers)
				}
				ft.layers, ft.only = t.Layers, t.Only
			default:
				if len(t.Only) > 0 {
					return nil, fmt.Errorf("%s.take[%d]: only applies to layers", where, j)
				}
				g, err := group(where, t.Group)
				if err != nil {
					return nil, err
				}
				ft.group = g
			}
			s.takes = append(s.takes, ft)
		}
		r.stages = append(r.stages, s)
	}
	return r, nil
}

// releaseFiles splits the catalog into the family's release files, nil when
// the family has none or it does not fit this config (a layer it names is
// missing, or a tensor is left over).
func (c *Config) releaseFiles() [][]safetensors.TensorSpec {
	r := c.sch.files
	if r == nil {
		return nil
	}
	cls := c.Classifier
	taken := map[string]bool{}
	take := func(seq []safetensors.TensorSpec, s safetensors.TensorSpec) []safetensors.TensorSpec {
		if taken[s.Name] {
			return seq
		}
		taken[s.Name] = true
		return append(seq, s)
	}
	var files [][]safetensors.TensorSpec
	for _, st := range r.stages {
		var seq []safetensors.TensorSpec
		for _, tk := range st.takes {
			if tk.layers == nil {
				for i := c.NumLayers; i < c.NumShards(); i++ {
					for _, s := range c.ShardTensors(i) {
						if cls.ParseName(s.Name).Group == tk.group {
							seq = take(seq, s)
						}
					}
				}
				continue
			}
			if tk.layers[1] >= c.NumLayers {
				return nil
			}
			for l := tk.layers[0]; l <= tk.layers[1]; l++ {
				lp := c.layerPrefixOf(l)
				for _, s := range c.ShardTensors(l) {
					if tk.only == nil || slices.ContainsFunc(tk.only, func(p string) bool { return strings.HasPrefix(strings.TrimPrefix(s.Name, lp), p) }) {
						seq = take(seq, s)
					}
				}
			}
		}
		files = append(files, splitFiles(seq, st.files, r.maxElements)...)
	}
	if len(taken) != c.NumTensors() {
		return nil
	}
	return files
}

// splitFiles fills up to n files in order: a file closes before a weight
// (with its _scale_inv, which follows it) that would take it past max
// elements, and the last takes the rest.
func splitFiles(seq []safetensors.TensorSpec, n int, max int64) [][]safetensors.TensorSpec {
	var out [][]safetensors.TensorSpec
	var cur []safetensors.TensorSpec
	var elems int64
	for i := 0; i < len(seq); {
		j := i + 1
		if j < len(seq) && seq[j].Name == DeepSeek.ScaleName(seq[i].Name) {
			j++
		}
		var k int64
		for _, s := range seq[i:j] {
			e, _ := safetensors.NumElements(s.Shape)
			k += e
		}
		if len(cur) > 0 && elems+k > max && len(out) < n-1 {
			out, cur, elems = append(out, cur), nil, 0
		}
		cur, elems = append(cur, seq[i:j]...), elems+k
		i = j
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
