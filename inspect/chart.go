package inspect

import (
	"bytes"
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/k3ckpt/k3ckpt/internal/atomicfile"
)

// Chart size: wide enough for five labelled bars and a legend of a dozen components.
const (
	chartWidth  = 22 * vg.Centimeter
	chartHeight = 14 * vg.Centimeter
	barWidth    = 1.6 * vg.Centimeter
)

// componentColors gives every component a stable color across charts, in the
// order components are listed (Tableau-like palette: distinguishable, printable).
var componentColors = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0xe1, 0x57, 0x59, 0xff},
	{0x76, 0xb7, 0xb2, 0xff}, {0x59, 0xa1, 0x4f, 0xff}, {0xed, 0xc9, 0x48, 0xff},
	{0xb0, 0x7a, 0xa1, 0xff}, {0xff, 0x9d, 0xa7, 0xff}, {0x9c, 0x75, 0x5f, 0xff},
	{0xba, 0xb0, 0xac, 0xff}, {0x1f, 0x4e, 0x79, 0xff}, {0x8c, 0x8c, 0x8c, 0xff},
}

// WriteChart draws the steps as stacked bars (one bar per step, one layer per
// component, GiB on the y axis, the total above each bar) and writes SVG to w.
func WriteChart(w io.Writer, title string, steps []Step) error {
	if len(steps) == 0 {
		return fmt.Errorf("%w: chart needs at least one step", ErrUsage)
	}
	// Components in first-seen order, so the stacking is the same in every bar.
	var names []string
	seen := map[string]int{}
	for _, s := range steps {
		for _, r := range s.Components {
			if _, ok := seen[r.Key]; !ok {
				seen[r.Key] = len(names)
				names = append(names, r.Key)
			}
		}
	}
	vals := make([]plotter.Values, len(names))
	for i := range vals {
		vals[i] = make(plotter.Values, len(steps))
	}
	labels := make([]string, len(steps))
	totals := make(plotter.XYs, len(steps))
	totalText := make([]string, len(steps))
	for j, s := range steps {
		labels[j] = s.Label
		for _, r := range s.Components {
			vals[seen[r.Key]][j] = gib(r.Bytes)
		}
		totals[j] = plotter.XY{X: float64(j), Y: gib(s.Total)}
		totalText[j] = fmt.Sprintf("%.2f", gib(s.Total))
	}

	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "GiB per rank"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = -2 * vg.Millimeter
	var below *plotter.BarChart
	for i, name := range names {
		bc, err := plotter.NewBarChart(vals[i], barWidth)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bc.Color = componentColors[i%len(componentColors)]
		bc.LineStyle.Width = vg.Points(0.3)
		bc.LineStyle.Color = color.White
		if below != nil {
			bc.StackOn(below)
		}
		p.Add(bc)
		p.Legend.Add(name, bc)
		below = bc
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
	p.Y.Max = maxTotal(steps) * 1.35
	wt, err := p.WriterTo(chartWidth, chartHeight, "svg")
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	_, err = wt.WriteTo(w)
	return err
}

// SaveChart writes the chart to path atomically.
func SaveChart(path, title string, steps []Step) error {
	var buf bytes.Buffer
	if err := WriteChart(&buf, title, steps); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, buf.Bytes(), 0o644)
}

func maxTotal(steps []Step) float64 {
	m := 0.0
	for _, s := range steps {
		m = max(m, gib(s.Total))
	}
	if m == 0 {
		return 1
	}
	return m
}
