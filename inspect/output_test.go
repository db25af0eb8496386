package inspect

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/layout"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// rawHeader parses a shard's header with encoding/json, independently of the
// codec's parser, as the reference for the listing.
func rawHeader(t *testing.T, path string) (map[string]json.RawMessage, int64) {
	t.Helper()
	b, err := readHead(path)
	must(t, err)
	n := int64(binary.LittleEndian.Uint64(b[:8]))
	var h map[string]json.RawMessage
	must(t, json.Unmarshal(b[8:], &h))
	delete(h, "__metadata__")
	return h, 8 + n
}

// tensorListReplica is the replica the tensor-list tests list: under -short
// the 4-layer cut (7 shards, every kind of tensor), the tiny replica's 96
// shards in the full run.
func tensorListReplica(t *testing.T) string {
	if testing.Short() {
		return smallReplica(t)
	}
	return tinyReplica(t)
}

func TestTensorListJSON(t *testing.T) {
	t.Parallel()
	dir := tensorListReplica(t)
	ck, err := safetensors.Open(dir)
	must(t, err)
	defer ck.Close()
	var buf bytes.Buffer
	must(t, WriteTensorList(&buf, ck, true))
	var out struct {
		Schema  int `json:"schema"`
		Tensors []struct {
			Name        string  `json:"name"`
			DType       string  `json:"dtype"`
			Shape       []int64 `json:"shape"`
			File        string  `json:"file"`
			DataOffsets []int64 `json:"data_offsets"`
		} `json:"tensors"`
		Files []struct {
			Path        string `json:"path"`
			HeaderBytes int64  `json:"header_bytes"`
			Size        int64  `json:"size"`
		} `json:"files"`
	}
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	must(t, dec.Decode(&out))
	if out.Schema != tensorListSchema {
		t.Errorf("schema %d, want %d", out.Schema, tensorListSchema)
	}
	ents, err := os.ReadDir(dir)
	must(t, err)
	var shards []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			shards = append(shards, e.Name())
		}
	}
	if len(out.Files) != len(shards) {
		t.Fatalf("%d files listed, %d on disk", len(out.Files), len(shards))
	}
	listed := make(map[string]int, len(out.Tensors)) // name → first entry
	for k := len(out.Tensors) - 1; k >= 0; k-- {
		listed[out.Tensors[k].Name] = k
	}
	seen := 0
	for i, f := range out.Files {
		if f.Path != shards[i] {
			t.Fatalf("file %d is %s, want %s", i, f.Path, shards[i])
		}
		h, hb := rawHeader(t, filepath.Join(dir, f.Path))
		st, err := os.Stat(filepath.Join(dir, f.Path))
		must(t, err)
		if f.HeaderBytes != hb || f.Size != st.Size() {
			t.Errorf("%s: header %d size %d, want %d %d", f.Path, f.HeaderBytes, f.Size, hb, st.Size())
		}
		for name, raw := range h {
			var want struct {
				DType       string  `json:"dtype"`
				Shape       []int64 `json:"shape"`
				DataOffsets []int64 `json:"data_offsets"`
			}
			must(t, json.Unmarshal(raw, &want))
			k, ok := listed[name]
			if !ok {
				t.Fatalf("%s: tensor %s not listed", f.Path, name)
			}
			e := out.Tensors[k]
			if e.File != f.Path || e.DType != want.DType || !slices.Equal(e.Shape, want.Shape) || !slices.Equal(e.DataOffsets, want.DataOffsets) {
				t.Errorf("%s: %+v, header says %+v", name, e, want)
			}
			seen++
		}
		if t.Failed() {
			return
		}
	}
	if seen != len(out.Tensors) {
		t.Errorf("%d tensors listed, %d in the headers", len(out.Tensors), seen)
	}
}

func TestTensorListTable(t *testing.T) {
	t.Parallel()
	dir := tensorListReplica(t)
	ck, err := safetensors.Open(dir)
	must(t, err)
	defer ck.Close()
	var buf bytes.Buffer
	must(t, WriteTensorList(&buf, ck, false))
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	// a header, its rule, one line per tensor
	var body []string
	for _, l := range lines {
		if strings.Contains(l, ".safetensors") {
			body = append(body, l)
		}
	}
	if len(body) != ck.NumTensors() {
		t.Fatalf("%d tensor lines, want %d", len(body), ck.NumTensors())
	}
	f := ck.Files[0]
	tn := f.Tensors[len(f.Tensors)-1]
	want := fmt.Sprintf("[%d, %d]", tn.Begin, tn.End)
	if !slices.ContainsFunc(body, func(l string) bool {
		return strings.Contains(l, tn.Name+" ") && strings.Contains(l, tn.DType.String()) && strings.Contains(l, want) && strings.Contains(l, f.Path)
	}) {
		t.Errorf("no line for %s %s %s in %s", tn.Name, tn.DType, want, f.Path)
	}
}

// TestReportOutputs checks the --json contract fields and the text tables on
// the tiny replica, for every grouping.
func TestReportOutputs(t *testing.T) {
	t.Parallel()
	dir := tinyReplica(t)
	for _, by := range []groupBy{byComponent, byDType, byLayer, byStage, byRank, byFile} {
		t.Run(string(by), func(t *testing.T) {
			rep, err := Inspect(dir, Options{By: by, Recipe: defaultRecipe})
			if err != nil {
				t.Fatal(err)
			}
			var sum tally
			for _, g := range rep.Groups {
				sum.merge(g.tally)
			}
			switch by {
			case byRank:
				if len(rep.Groups) != 16 {
					t.Errorf("%d rank rows", len(rep.Groups))
				}
			case byStage:
				if len(rep.Groups) != 16 || sum.Bytes != rep.Recipe.TotalBytes {
					t.Errorf("%d stage rows holding %d B, want 16 holding the recipe output's %d", len(rep.Groups), sum.Bytes, rep.Recipe.TotalBytes)
				}
			case byLayer:
				if len(rep.Groups) != 94 || rep.Groups[93].Key != "model" || sum != (tally{rep.TensorCount, rep.TotalBytes}) {
					t.Errorf("%d layer rows (last %s) summing to %+v", len(rep.Groups), rep.Groups[len(rep.Groups)-1].Key, sum)
				}
			default:
				if sum != (tally{rep.TensorCount, rep.TotalBytes}) {
					t.Errorf("rows sum to %+v, totals %d/%d", sum, rep.TensorCount, rep.TotalBytes)
				}
			}
			var js bytes.Buffer
			must(t, writeJSON(&js, rep))
			var m map[string]any
			must(t, json.Unmarshal(js.Bytes(), &m))
			for _, k := range []string{"total_bytes", "tensor_count", "files", "components", "dtypes", "recipe"} {
				if _, ok := m[k]; !ok {
					t.Errorf("JSON lacks %q", k)
				}
			}
			c0 := m["components"].([]any)[0].(map[string]any)
			d0 := m["dtypes"].([]any)[0].(map[string]any)
			f0 := m["files"].([]any)[0].(map[string]any)
			for obj, keys := range map[string][]string{"components": {"name", "tensors", "bytes"}, "dtypes": {"dtype", "tensors", "bytes"}, "files": {"path", "header_bytes", "size"}} {
				src := map[string]map[string]any{"components": c0, "dtypes": d0, "files": f0}[obj]
				for _, k := range keys {
					if _, ok := src[k]; !ok {
						t.Errorf("%s entries lack %q: %v", obj, k, src)
					}
				}
			}
			if by == byRank {
				r0 := m["ranks"].([]any)[0].(map[string]any)
				for _, k := range []string{"rank", "bytes", "components"} {
					if _, ok := r0[k]; !ok {
						t.Errorf("ranks entries lack %q", k)
					}
				}
			}
			var txt bytes.Buffer
			must(t, WriteText(&txt, rep, 0, false))
			s := txt.String()
			for _, want := range []string{"total", gibUnit.str(rep.TotalBytes), "recipe " + defaultRecipe, "quantization (config.json text_config.quantization_config)"} {
				if !strings.Contains(s, want) {
					t.Errorf("text lacks %q:\n%s", want, s)
				}
			}
		})
	}
}

// TestPartition checks --pp-partition reaches the layout and a bad one is
// refused with the layout package's error.
func TestPartition(t *testing.T) {
	t.Parallel()
	dir := tinyReplica(t)
	part := []int{6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 3}
	rep, err := Inspect(dir, Options{By: byStage, PPPartition: part})
	if err != nil {
		t.Fatal(err)
	}
	for s, st := range rep.Layout.Stages {
		if st.Layers != [2]int{6 * s, 6*s + part[s]} {
			t.Errorf("stage %d layers %v", s, st.Layers)
		}
	}
	bad := slices.Repeat([]int{7}, 16)
	if _, err := Inspect(dir, Options{By: byStage, PPPartition: bad}); err == nil || !strings.Contains(err.Error(), "112") || !strings.Contains(err.Error(), "93") {
		t.Errorf("partition summing to 112: err = %v, want the layout error naming 112 and 93", err)
	}
}

var barPath = regexp.MustCompile(`<path d="M([0-9.]+),([0-9.]+)L[0-9.]+,([0-9.]+)L([0-9.]+),[0-9.]+L[0-9.]+,[0-9.]+Z" style="fill:#([0-9A-F]{6})"`)

// TestChart draws two steps and measures the bars in the SVG: heights must be
// proportional to the GiB given, and every label must be there.
func TestChart(t *testing.T) {
	t.Parallel()
	steps := []step{
		{Label: "before", Total: 100 * giB, Components: []row{{Key: "attention.kda", tally: tally{1, 20 * giB}}, {Key: "routed_experts", tally: tally{1, 80 * giB}}}},
		{Label: "after", Total: 85 * giB, Components: []row{{Key: "attention.kda", tally: tally{1, 5 * giB}}, {Key: "routed_experts", tally: tally{1, 80 * giB}}}},
	}
	var buf bytes.Buffer
	must(t, writeChartSVG(&buf, steps, chartOptions{Title: "test chart", GPUMem: 141 * giB}))
	svg := buf.String()
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
	}
	for _, s := range []string{"test chart", "before", "after", "rank 0", "100.00", "85.00", "attention.kda", "routed_experts", "GiB per rank", "GPU memory 141.00 GiB"} {
		if !strings.Contains(svg, ">"+s+"<") {
			t.Errorf("chart lacks text %q", s)
		}
	}
	colorOf := func(name string) string {
		c := componentColor(name, 0).(interface{ RGBA() (r, g, b, a uint32) })
		r, g, b, _ := c.RGBA()
		return fmt.Sprintf("%02X%02X%02X", r>>8, g>>8, b>>8)
	}
	heights := map[string][]float64{}
	for _, m := range barPath.FindAllStringSubmatch(svg, -1) {
		x0, _ := strconv.ParseFloat(m[1], 64)
		y0, _ := strconv.ParseFloat(m[2], 64)
		y1, _ := strconv.ParseFloat(m[3], 64)
		x1, _ := strconv.ParseFloat(m[4], 64)
		if x1-x0 < 30 { // legend swatches are narrower than bars
			continue
		}
		heights[m[5]] = append(heights[m[5]], y1-y0)
	}
	kda, exp := heights[colorOf("attention.kda")], heights[colorOf("routed_experts")]
	if len(kda) != 2 || len(exp) != 2 {
		t.Fatalf("bars: kda %v experts %v", kda, exp)
	}
	near := func(a, b float64) bool { return a > b*0.99 && a < b*1.01 }
	if !near(exp[0], exp[1]) || !near(kda[0]/exp[0], 20.0/80) || !near(kda[1]/exp[1], 5.0/80) {
		t.Errorf("bar heights kda %v experts %v, want 20:80 and 5:80", kda, exp)
	}
	if strings.Contains(svg, "FP8 =") {
		t.Errorf("chart without an FP8 step names a recipe")
	}
	buf.Reset()
	must(t, writeChartSVG(&buf, []step{{Label: "FP8", Total: giB}}, chartOptions{Recipe: "modelopt-k3", Experts: convert.ExpertsNVFP4}))
	if !strings.Contains(buf.String(), "FP8 = recipe modelopt-k3, routed experts NVFP4<") {
		t.Errorf("chart title does not name the recipe and experts mode it was given")
	}
	if err := SaveChart(filepath.Join(t.TempDir(), "c.gif"), &Report{}, 0); !errors.Is(err, errUsage) {
		t.Errorf("a .gif chart: err = %v, want ErrUsage", err)
	}
	if _, err := Inspect(tinyReplica(t), Options{Steps: true}); !errors.Is(err, errUsage) {
		t.Errorf("steps without a layout: err = %v, want ErrUsage", err)
	}
	if _, err := Inspect(tinyReplica(t), Options{Recipe: "int3"}); !errors.Is(err, errUsage) {
		t.Errorf("unknown recipe: err = %v, want ErrUsage", err)
	}
}

// TestInspectEntryPoints opens the same checkpoint through its index and one
// shard through its file.
func TestInspectEntryPoints(t *testing.T) {
	t.Parallel()
	dir := tinyReplica(t)
	whole, err := Inspect(dir, Options{})
	must(t, err)
	viaIndex, err := Inspect(filepath.Join(dir, safetensors.IndexName), Options{})
	must(t, err)
	if viaIndex.TotalBytes != whole.TotalBytes || !equalRows(viaIndex.Components, whole.Components) {
		t.Errorf("index audit differs from directory audit")
	}
	one, err := Inspect(filepath.Join(dir, "model-00001-of-000096.safetensors"), Options{By: byLayer})
	must(t, err)
	if len(one.Files) != 1 || len(one.Groups) != 1 || one.Groups[0].Key != "0" || one.TotalBytes != whole.Files[0].Bytes {
		t.Errorf("single file: %d files, groups %v, %d B (want layer 0 only, %d B)", len(one.Files), one.Groups, one.TotalBytes, whole.Files[0].Bytes)
	}
	// config.json sits next to it: the other 95 shards' tensors are noted missing, once.
	if len(one.Warnings) != 1 || !strings.Contains(one.Warnings[0], "not in the checkpoint") {
		t.Errorf("warnings %v", one.Warnings)
	}
}

// TestStageTensorsDistinct: a stage row counts each tensor once, however many
// ranks of the stage hold a piece of it (pp8-tp8 splits tensors over 8 ranks).
// pp8-tp8 runs on the tiny variant whose experts and MLA heads split 8 ways
// (testckpt.TPConfigJSON): the tiny replica's MXFP4 w2 scales ([96, 1])
// cannot be split 8 ways.
func TestStageTensorsDistinct(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"pp16", "pp8-tp8"} {
		var rep *Report
		if name == "pp16" {
			var err error
			if rep, err = Inspect(tinyReplica(t), Options{By: byStage, Layout: name}); err != nil {
				t.Fatal(err)
			}
		} else {
			rep = auditFake(t, fakeConfig(t, testckpt.TPConfigJSON(t)), Options{By: byStage, Layout: name})
		}
		var n, pieces int64
		for _, s := range rep.Layout.Stages {
			n += s.Tensors
		}
		for _, r := range rep.Layout.Ranks {
			pieces += r.Tensors
		}
		if rep.Layout.DroppedBytes == 0 && n != rep.TensorCount {
			t.Errorf("%s: stages hold %d distinct tensors, checkpoint has %d", name, n, rep.TensorCount)
		}
		if name == "pp8-tp8" && pieces <= n {
			t.Errorf("%s: %d pieces over ranks for %d tensors: nothing split?", name, pieces, n)
		}
	}
}

// TestLayoutFile plans a layout given as a JSON file (the built-in dp16 written
// out): the same ranks as the built-in, and memory steps without switches.
func TestLayoutFile(t *testing.T) {
	t.Parallel()
	dir := tinyReplica(t)
	builtin, err := Inspect(dir, Options{Layout: "dp16"})
	must(t, err)
	cfgJSON, err := os.ReadFile(filepath.Join(dir, "config.json"))
	must(t, err)
	cfg, err := model.ParseConfig(cfgJSON)
	must(t, err)
	a := &auditor{cfg: cfg}
	o, err := layout.DefaultOptions("dp16")
	must(t, err)
	l, err := a.resolveLayout("dp16", &o)
	must(t, err)
	js, err := json.Marshal(l)
	must(t, err)
	file := filepath.Join(t.TempDir(), "my-dp16.json")
	must(t, os.WriteFile(file, js, 0o644))

	rep, err := Inspect(dir, Options{Layout: file, Steps: true})
	must(t, err)
	if rep.Layout.Options != nil || len(rep.Ranks) != len(builtin.Ranks) {
		t.Fatalf("layout file: options %v, %d ranks", rep.Layout.Options, len(rep.Ranks))
	}
	for i := range rep.Ranks {
		if rep.Ranks[i].Bytes != builtin.Ranks[i].Bytes || !equalRows(rep.Ranks[i].Components, builtin.Ranks[i].Components) {
			t.Errorf("rank %d: file layout %+v, built-in %+v", i, rep.Ranks[i], builtin.Ranks[i])
		}
	}
	if len(rep.Steps) != 2 || rep.Steps[0].Label != "as is" || rep.Steps[1].Label != "FP8" || rep.Steps[1].Total >= rep.Steps[0].Total {
		t.Errorf("steps of a layout file: %+v", rep.Steps)
	}
}

// TestTensorListEscapes lists a file whose tensor name carries a terminal
// escape and a newline: the table shows them escaped, on one line, and the
// JSON keeps the exact name.
func TestTensorListEscapes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	name := "evil\x1b[2J\nname"
	path := filepath.Join(dir, "x.safetensors")
	hdr := `{"` + strings.ReplaceAll(strings.ReplaceAll(name, "\x1b", `\u001b`), "\n", `\n`) + `":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	b = append(append(b, hdr...), 1, 2)
	must(t, os.WriteFile(path, b, 0o644))
	ck, err := safetensors.Open(path)
	must(t, err)
	defer ck.Close()
	var txt, js bytes.Buffer
	must(t, WriteTensorList(&txt, ck, false))
	if s := txt.String(); strings.ContainsAny(s, "\x1b") || !strings.Contains(s, `evil\x1b[2J\nname`) || strings.Count(s, "\n") != 3 {
		t.Errorf("table does not escape the name:\n%q", s)
	}
	must(t, WriteTensorList(&js, ck, true))
	var out struct {
		Tensors []tensorItem `json:"tensors"`
	}
	must(t, json.Unmarshal(js.Bytes(), &out))
	if len(out.Tensors) != 1 || out.Tensors[0].Name != name {
		t.Errorf("JSON tensors %+v, want one named %q", out.Tensors, name)
	}
}

// writeChartSVG draws the steps as stacked bars (one bar per step, one layer per
// component, the total above each bar) and writes SVG to w.
func writeChartSVG(w io.Writer, steps []step, o chartOptions) error {
	return writeChart(w, steps, o, "svg")
}

// writeJSON writes the report as one indented JSON object.
func writeJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
