package inspect

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/model"
)

// Chart geometry: the legend in its own column right of the plot, so no
// legend text runs under a bar, with room to spare for a wider fallback font.
const (
	chartWidth   = 24 * vg.Centimeter
	chartHeight  = 14 * vg.Centimeter
	legendWidth  = 5.6 * vg.Centimeter
	barWidth     = 1.5 * vg.Centimeter
	chartPadding = 4 * vg.Millimeter
	chartDPI     = 144
)

// chartBase is the component drawn at the bottom of every bar.
const chartBase = "routed_experts"

// svgFontFamily replaces the one font name gonum writes into an SVG with
// metric-compatible fallbacks, so text keeps about the size laid out.
const svgFontFamily = `font-family:'Liberation Sans',Arimo,Arial,Helvetica,sans-serif;`

// componentColors gives every component, by schema order, a stable color (Tableau-like).
var componentColors = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0xe1, 0x57, 0x59, 0xff},
	{0x76, 0xb7, 0xb2, 0xff}, {0x59, 0xa1, 0x4f, 0xff}, {0xed, 0xc9, 0x48, 0xff},
	{0xb0, 0x7a, 0xa1, 0xff}, {0xff, 0x9d, 0xa7, 0xff}, {0x9c, 0x75, 0x5f, 0xff},
	{0xba, 0xb0, 0xac, 0xff}, {0x1f, 0x4e, 0x79, 0xff}, {0x8c, 0x8c, 0x8c, 0xff},
}

// capacityColor draws the GPU capacity line.
var capacityColor = color.RGBA{0xc0, 0x10, 0x10, 0xff}

// chartFormats are the image formats SaveChart writes, by file extension.
var chartFormats = []string{"svg", "png", "pdf"}

// chartOptions are the title's first line, the Recipe ("": defaultRecipe) and
// Experts the steps were planned with, and the bytes of a GPU capacity line.
type chartOptions struct {
	Title   string
	Recipe  string
	Experts convert.ExpertsMode
	GPUMem  int64
}

// chartFont is the sans-serif face every text of the chart uses.
func chartFont(s *text.Style, size vg.Length) {
	s.Font.Typeface, s.Font.Variant, s.Font.Size = "Liberation", "Sans", size
}

// writeChart draws steps (one at least: SaveChart checks) in a chartFormat.
func writeChart(w io.Writer, steps []step, o chartOptions, format string) error {
	// Routed experts first (the base, the same at every step), then the rest
	// in first-seen order, so the steps' changes show at the top of the bars.
	var names []string
	for _, s := range steps {
		for _, r := range s.Components {
			if !slices.Contains(names, r.Key) {
				names = append(names, r.Key)
			}
		}
	}
	if i := slices.Index(names, chartBase); i > 0 {
		names = slices.Insert(slices.Delete(names, i, i+1), 0, chartBase)
	}
	top := max(1, float64(o.GPUMem)) // an empty chart still has a scale
	for _, s := range steps {
		top = max(top, float64(s.Total))
	}
	u := unitFor(int64(top))
	vals := make([]plotter.Values, len(names))
	for i := range vals {
		vals[i] = make(plotter.Values, len(steps))
	}
	labels := make([]string, len(steps))
	totals := make(plotter.XYs, len(steps))
	totalText := make([]string, len(steps))
	for j, s := range steps {
		labels[j] = s.Label + "\nrank " + strconv.Itoa(s.Rank)
		for _, r := range s.Components {
			vals[slices.Index(names, r.Key)][j] = u.of(r.Bytes)
		}
		totals[j] = plotter.XY{X: float64(j), Y: u.of(s.Total)}
		totalText[j] = u.str(s.Total)
	}

	p := plot.New()
	p.Title.Text = o.Title + "\neach bar: the rank holding the most weight bytes at that step" + fp8Caption(steps, o)
	chartFont(&p.Title.TextStyle, 11)
	p.Title.Padding = 3 * vg.Millimeter
	p.Y.Label.Text = u.name + " per rank"
	chartFont(&p.Y.Label.TextStyle, 11)
	chartFont(&p.Y.Tick.Label, 9)
	chartFont(&p.X.Tick.Label, 9)
	p.Y.Min = 0
	p.Y.Max = top / u.size * 1.15 // head room for the total labels
	p.Y.Tick.Marker = gibTicks{}
	p.X.Min, p.X.Max = -0.7, float64(len(steps)-1)+0.7
	bars := make([]*plotter.BarChart, len(names))
	for i := range names {
		bc, err := plotter.NewBarChart(vals[i], barWidth)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bc.Color = componentColor(names[i], i)
		bc.LineStyle.Width = vg.Points(0.3)
		bc.LineStyle.Color = color.White
		if i > 0 {
			bc.StackOn(bars[i-1])
		}
		p.Add(bc)
		bars[i] = bc
	}
	leg := plot.NewLegend()
	chartFont(&leg.TextStyle, 10)
	leg.Top, leg.Left = true, true
	leg.ThumbnailWidth = 4 * vg.Millimeter
	for i := len(names) - 1; i >= 0; i-- { // legend top to bottom = stack top to bottom
		leg.Add(names[i], bars[i])
	}
	lb, err := plotter.NewLabels(plotter.XYLabels{XYs: totals, Labels: totalText})
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	for i := range lb.TextStyle {
		chartFont(&lb.TextStyle[i], 9)
		lb.TextStyle[i].XAlign = draw.XCenter
		lb.TextStyle[i].YAlign = draw.YBottom
	}
	p.Add(lb)
	if o.GPUMem > 0 {
		y := u.of(o.GPUMem)
		line, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: y}, {X: p.X.Max, Y: y}})
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		line.Color = capacityColor
		line.Width = vg.Points(1.2)
		line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(line)
		leg.Add("GPU memory "+u.str(o.GPUMem)+" "+u.name, line)
	}
	p.NominalX(labels...)

	var c vg.CanvasWriterTo
	switch format {
	case "svg":
		c = vgsvg.New(chartWidth, chartHeight)
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(chartWidth, chartHeight), vgimg.UseDPI(chartDPI))}
	default: // pdf
		c = vgpdf.New(chartWidth, chartHeight)
	}
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	dc = draw.Crop(dc, chartPadding, -chartPadding, chartPadding, -chartPadding)
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	leg.Draw(draw.Crop(dc, dc.Max.X-dc.Min.X-legendWidth+chartPadding, 0, 0, -p.Title.TextStyle.Height(p.Title.Text)-p.Title.Padding))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return err
	}
	b := buf.Bytes()
	if format == "svg" {
		b = bytes.ReplaceAll(b, []byte("font-family:Liberation Sans;"), []byte(svgFontFamily))
	}
	_, err = w.Write(b)
	return err
}

// chartFormat returns path's chart format, checking its directory exists.
func chartFormat(path string) (string, error) {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	if !slices.Contains(chartFormats, format) {
		return "", fmt.Errorf("%w: --chart %s: the name must end in .%s", errUsage, path, strings.Join(chartFormats, ", ."))
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: --chart %s: directory %s does not exist", errUsage, path, dir)
	}
	return format, nil
}

// SaveChart writes the chart of rep's memory steps (Options.Steps) to path
// atomically, in the format its extension names, with a capacity line at
// gpuMem bytes when positive. Errors name path, never the temporary file.
func SaveChart(path string, rep *Report, gpuMem int64) error {
	format, err := chartFormat(path)
	if err != nil {
		return err
	}
	if rep.Layout == nil || len(rep.Layout.Steps) == 0 {
		return fmt.Errorf("%w: --chart %s: the report has no memory steps (audit with Steps and a layout)", errUsage, path)
	}
	what := "weight memory of the fullest rank"
	if len(rep.Layout.Stages) > 1 {
		what = "weight memory of the fullest stage's rank"
	}
	title := fmt.Sprintf("%s: %s under %s", termtext.Name(rep.Source), what, rep.Layout.Name)
	o := chartOptions{Title: title, Recipe: rep.Layout.Recipe, Experts: rep.Layout.Experts, GPUMem: gpuMem}
	var buf bytes.Buffer
	if err := writeChart(&buf, rep.Layout.Steps, o, format); err != nil {
		return err
	}
	if err := filewrite.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		var pe *os.PathError
		var le *os.LinkError
		switch {
		case errors.As(err, &le):
			err = le.Err
		case errors.As(err, &pe):
			err = pe.Err
		}
		return fmt.Errorf("chart %s: cannot write: %w", path, err)
	}
	return nil
}

// fp8Caption says what the FP8 bar applies, when there is one.
func fp8Caption(steps []step, o chartOptions) string {
	if !slices.ContainsFunc(steps, func(s step) bool { return s.Label == fp8Label }) {
		return ""
	}
	c := "; FP8 = recipe " + cmp.Or(o.Recipe, defaultRecipe)
	if o.Experts == convert.ExpertsNVFP4 {
		c += ", routed experts NVFP4"
	}
	return c
}

// componentColor picks a color by the component's place in the schema.
func componentColor(name string, i int) color.Color {
	if c, err := model.ParseComponent(name); err == nil {
		i = int(c)
	}
	return componentColors[i%len(componentColors)]
}

// gibTicks labels the size axis about eight times, every 1, 2, 2.5 or 5 × 10^k
// units (gonum's default labels too few).
type gibTicks struct{}

func (gibTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	if span <= 0 {
		return nil
	}
	raw := span / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		if mid := v + step/2; mid < hi {
			ticks = append(ticks, plot.Tick{Value: mid})
		}
	}
	return ticks
}
