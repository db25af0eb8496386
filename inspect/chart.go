package inspect

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/k3ckpt/k3ckpt/internal/atomicfile"
	"github.com/k3ckpt/k3ckpt/model"
)

// Chart size: wide enough for five labelled bars and a legend of a dozen components.
const (
	chartWidth  = 22 * vg.Centimeter
	chartHeight = 14 * vg.Centimeter
	barWidth    = 1.6 * vg.Centimeter
)

// chartBase is the component drawn at the bottom of every bar.
const chartBase = "routed_experts"

// componentColors gives every component a stable color across charts, in the
// order components are listed (Tableau-like palette: distinguishable, printable).
var componentColors = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0xe1, 0x57, 0x59, 0xff},
	{0x76, 0xb7, 0xb2, 0xff}, {0x59, 0xa1, 0x4f, 0xff}, {0xed, 0xc9, 0x48, 0xff},
	{0xb0, 0x7a, 0xa1, 0xff}, {0xff, 0x9d, 0xa7, 0xff}, {0x9c, 0x75, 0x5f, 0xff},
	{0xba, 0xb0, 0xac, 0xff}, {0x1f, 0x4e, 0x79, 0xff}, {0x8c, 0x8c, 0x8c, 0xff},
}

// ChartFormats are the image formats SaveChart writes, by file extension.
var ChartFormats = []string{"svg", "png", "pdf"}

// WriteChart draws the steps as stacked bars (one bar per step, one layer per
// component, GiB on the y axis, the total above each bar) and writes SVG to w.
func WriteChart(w io.Writer, title string, steps []Step) error {
	return writeChart(w, title, steps, "svg")
}

func writeChart(w io.Writer, title string, steps []Step, format string) error {
	if len(steps) == 0 {
		return fmt.Errorf("%w: chart needs at least one step", ErrUsage)
	}
	// Routed experts first (the base, the same at every step), then the rest
	// in first-seen order, so the steps' changes show at the top of the bars.
	var names []string
	seen := map[string]int{}
	for pass := range 2 {
		for _, s := range steps {
			for _, r := range s.Components {
				if _, ok := seen[r.Key]; !ok && (pass == 1 || r.Key == chartBase) {
					seen[r.Key] = len(names)
					names = append(names, r.Key)
				}
			}
		}
	}
	vals := make([]plotter.Values, len(names))
	for i := range vals {
		vals[i] = make(plotter.Values, len(steps))
	}
	u := unitFor(int64(maxTotal(steps)))
	labels := make([]string, len(steps))
	totals := make(plotter.XYs, len(steps))
	totalText := make([]string, len(steps))
	for j, s := range steps {
		labels[j] = s.Label
		for _, r := range s.Components {
			vals[seen[r.Key]][j] = u.of(r.Bytes)
		}
		totals[j] = plotter.XY{X: float64(j), Y: u.of(s.Total)}
		totalText[j] = u.str(s.Total)
	}

	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = u.name + " per rank"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = -2 * vg.Millimeter
	var below *plotter.BarChart
	bars := make([]*plotter.BarChart, len(names))
	for i := range names {
		bc, err := plotter.NewBarChart(vals[i], barWidth)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bc.Color = componentColor(names[i], i)
		bc.LineStyle.Width = vg.Points(0.3)
		bc.LineStyle.Color = color.White
		if below != nil {
			bc.StackOn(below)
		}
		p.Add(bc)
		bars[i] = bc
		below = bc
	}
	for i := len(names) - 1; i >= 0; i-- { // legend top to bottom = stack top to bottom
		p.Legend.Add(names[i], bars[i])
	}
	lb, err := plotter.NewLabels(plotter.XYLabels{XYs: totals, Labels: totalText})
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].XAlign = draw.XCenter
		lb.TextStyle[i].YAlign = draw.YBottom
	}
	p.Add(lb)
	p.NominalX(labels...)
	// Head room for the total labels and the legend.
	p.Y.Max = u.of(int64(maxTotal(steps))) * 1.35
	p.Y.Tick.Marker = gibTicks{}
	wt, err := p.WriterTo(chartWidth, chartHeight, format)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	_, err = wt.WriteTo(w)
	return err
}

// SaveChart writes the chart to path atomically, in the format its extension
// names (one of ChartFormats).
func SaveChart(path, title string, steps []Step) error {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	if !slices.Contains(ChartFormats, format) {
		return fmt.Errorf("%w: chart %s: extension must be one of %v", ErrUsage, path, ChartFormats)
	}
	var buf bytes.Buffer
	if err := writeChart(&buf, title, steps, format); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, buf.Bytes(), 0o644)
}

// componentColor keeps a component's color the same in every chart: it is
// picked by the component's place in the schema, not by what a chart shows.
func componentColor(name string, i int) color.Color {
	if c, err := model.ParseComponent(name); err == nil {
		i = int(c)
	}
	return componentColors[i%len(componentColors)]
}

// maxTotal is the tallest bar in bytes (at least 1, so an empty chart has a scale).
func maxTotal(steps []Step) float64 {
	m := 1.0
	for _, s := range steps {
		m = max(m, float64(s.Total))
	}
	return m
}

// gibTicks labels the size axis every 1, 2, 2.5 or 5 × 10^k units, about eight
// labels over the range (gonum's default ticker labels too few on this scale).
type gibTicks struct{}

// Ticks returns the major and minor ticks for [lo, hi].
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
