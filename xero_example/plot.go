package main

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	_ "gonum.org/v1/plot/vg/vgimg" // png
	_ "gonum.org/v1/plot/vg/vgsvg" // svg
)

// plotFormat is the image format -plot writes, from the file's extension.
func plotFormat(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		return "svg", nil
	case ".png":
		return "png", nil
	}
	return "", fmt.Errorf("-plot %q: the extension picks the format; want a .svg or .png file", path)
}

// checkPlotPath refuses, before the run, a -plot file that could not be written afterwards.
func checkPlotPath(path string) error {
	if _, err := plotFormat(path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("-plot %q: directory %s does not exist", path, dir)
	}
	return nil
}

// callLog is one tenant's calls as the chart sees them, as real instants: the local upstream's
// record of what it counted and refused, or (against a real API) the client's send instants.
type callLog struct {
	tenant   string
	accepted []time.Time // calls counted against the tenant's minute, another app's included
	refused  []time.Time // calls answered 429
}

// point is a chart point: X in seconds of Xero time since the run started, Y a count.
type point struct{ X, Y float64 }

// tenantSeries is what one tenant's panel shows.
type tenantSeries struct {
	tenant string
	// usage is a step function: from each point's X until the next, Y calls are counted in the
	// trailing window. It starts at X 0 (calls before the run, another app's, included) and
	// ends at the run's end.
	usage []point
	// perSecond[k] is the calls (accepted or refused) that reached the upstream in [k, k+1)
	// seconds of Xero time; calls made before the run are not in it.
	perSecond []int
	// refused has one point per 429: when, and how many calls the window held then.
	refused []point
}

// chartData turns each tenant's call instants into the chart's series. A call at instant a
// counts in the window at t when a <= t < a+window, as the upstream counts it. X values are
// seconds of Xero time: the real offset from origin times scale. It is a pure function.
func chartData(logs []callLog, origin, end time.Time, window time.Duration, scale float64) []tenantSeries {
	x := func(t time.Time) float64 { return float64(t.Sub(origin)) * scale / float64(time.Second) }
	xEnd := x(end)
	bins := max(1, int(math.Ceil(xEnd)))
	out := make([]tenantSeries, 0, len(logs))
	for _, l := range logs {
		acc := slices.Clone(l.accepted)
		slices.SortFunc(acc, time.Time.Compare)
		// inWindow counts the accepted calls a with t-window < a <= t.
		upTo := func(t time.Time) int { // calls at or before t
			i, _ := slices.BinarySearchFunc(acc, t, func(a, t time.Time) int {
				if a.After(t) {
					return 1
				}
				return -1
			})
			return i
		}
		inWindow := func(t time.Time) int { return upTo(t) - upTo(t.Add(-window)) }

		s := tenantSeries{tenant: l.tenant, perSecond: make([]int, bins)}
		type change struct {
			at    time.Time
			delta int
		}
		changes := make([]change, 0, 2*len(acc))
		for _, a := range acc {
			changes = append(changes, change{a, +1}, change{a.Add(window), -1})
		}
		slices.SortStableFunc(changes, func(a, b change) int { return a.at.Compare(b.at) })
		n := inWindow(origin)
		s.usage = append(s.usage, point{0, float64(n)})
		for i := 0; i < len(changes); {
			at := changes[i].at
			if at.After(end) {
				break
			}
			for ; i < len(changes) && changes[i].at.Equal(at); i++ {
				if at.After(origin) {
					n += changes[i].delta
				}
			}
			if last := s.usage[len(s.usage)-1]; at.After(origin) && float64(n) != last.Y {
				s.usage = append(s.usage, point{x(at), float64(n)})
			}
		}
		if s.usage[len(s.usage)-1].X < xEnd {
			s.usage = append(s.usage, point{xEnd, float64(n)})
		}

		count := func(t time.Time) {
			if t.Before(origin) || t.After(end) {
				return
			}
			s.perSecond[min(int(x(t)), bins-1)]++
		}
		for _, a := range acc {
			count(a)
		}
		ref := slices.Clone(l.refused)
		slices.SortFunc(ref, time.Time.Compare)
		for _, r := range ref {
			count(r)
			s.refused = append(s.refused, point{x(r), float64(inWindow(r))})
		}
		out = append(out, s)
	}
	return out
}

// Chart geometry: one panel per tenant under a header, at 96 dpi for PNG (960 pixels wide,
// 48 for the header and 288 for each panel).
const (
	chartWidth   = 10 * vg.Inch
	chartHeader  = vg.Inch / 2
	chartPanel   = 3 * vg.Inch
	limitLabel   = "limit: 60 per minute"
	refusedLabel = "429 Too Many Requests"
)

func chartSize(tenants int) (w, h vg.Length) {
	return chartWidth, chartHeader + vg.Length(tenants)*chartPanel
}

// chartInfo is what the chart's labels say about the run.
type chartInfo struct {
	scale    float64
	requests int  // per tenant
	upstream bool // the series are the local upstream's counts (else the client's sends)
	end      float64
}

// writeChart draws one panel per tenant and writes the image to path, in the format its
// extension names.
func writeChart(path string, series []tenantSeries, info chartInfo) error {
	format, err := plotFormat(path)
	if err != nil {
		return err
	}
	if len(series) == 0 {
		return errors.New("-plot: no tenant to chart")
	}
	w, h := chartSize(len(series))
	cw, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return err
	}
	dc := draw.New(cw)
	dc.FillPolygon(color.White, []vg.Point{{X: 0, Y: 0}, {X: w, Y: 0}, {X: w, Y: h}, {X: 0, Y: h}})

	refusedTotal := 0
	for _, s := range series {
		refusedTotal += len(s.refused)
	}
	header := plot.New().Title.TextStyle
	header.Font.Size = 14
	header.YAlign = draw.YCenter
	dc.FillText(header, vg.Point{X: w / 2, Y: h - chartHeader/2},
		fmt.Sprintf("Xero example at scale %g×: %d tenants × %d requests, %d × 429",
			info.scale, len(series), info.requests, refusedTotal))

	plots := make([][]*plot.Plot, len(series))
	for i, s := range series {
		p, err := tenantPlot(s, info)
		if err != nil {
			return err
		}
		plots[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(series), Cols: 1, PadTop: 4, PadBottom: 4, PadX: 8, PadY: 12, PadLeft: 8, PadRight: 12}
	body := draw.Crop(dc, 0, 0, 0, -chartHeader)
	for i, c := range plot.Align(plots, tiles, body) {
		plots[i][0].Draw(c[0])
	}

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	if _, err := cw.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("-plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-plot %s: %w", path, err)
	}
	return nil
}

// tenantPlot is one tenant's panel: calls per second, the trailing window's count against the
// limit line, and the 429s.
func tenantPlot(s tenantSeries, info chartInfo) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %d × 429", s.tenant, len(s.refused))
	p.X.Label.Text = fmt.Sprintf("time since the run started (s of Xero time = %g × real time)", info.scale)
	p.Y.Label.Text = "requests"
	p.X.Min, p.X.Max = 0, max(info.end, 1)
	p.Y.Min = 0
	top := float64(xeroMinuteLimit)
	for _, u := range s.usage {
		top = max(top, u.Y)
	}
	for _, n := range s.perSecond {
		top = max(top, float64(n))
	}
	p.Y.Max = math.Ceil(top*1.6/10) * 10 // room above the limit line for the legend
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Inch // right of the first window's burst, above the limit line
	p.Legend.TextStyle.Font.Size = 10
	p.Legend.Padding = vg.Points(1.5)
	p.Add(plotter.NewGrid())

	rate := make(plotter.XYs, 0, len(s.perSecond)+1)
	for k, n := range s.perSecond {
		rate = append(rate, plotter.XY{X: float64(k), Y: float64(n)})
	}
	if len(s.perSecond) > 0 {
		rate = append(rate, plotter.XY{X: float64(len(s.perSecond)), Y: float64(s.perSecond[len(s.perSecond)-1])})
	}
	rateLine, err := plotter.NewLine(rate)
	if err != nil {
		return nil, err
	}
	rateLine.StepStyle = plotter.PostStep
	rateLine.Color = color.RGBA{R: 70, G: 130, B: 180, A: 255}
	rateLine.Width = vg.Points(0.75)
	rateLine.FillColor = color.NRGBA{R: 70, G: 130, B: 180, A: 110}

	use := make(plotter.XYs, len(s.usage))
	for i, u := range s.usage {
		use[i] = plotter.XY{X: u.X, Y: u.Y}
	}
	useLine, err := plotter.NewLine(use)
	if err != nil {
		return nil, err
	}
	useLine.StepStyle = plotter.PostStep
	useLine.Color = color.RGBA{G: 110, A: 255}
	useLine.Width = vg.Points(1.75)

	limit, err := plotter.NewLine(plotter.XYs{{X: 0, Y: xeroMinuteLimit}, {X: p.X.Max, Y: xeroMinuteLimit}})
	if err != nil {
		return nil, err
	}
	limit.Color = color.RGBA{R: 200, A: 255}
	limit.Width = vg.Points(1.25)
	limit.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}

	p.Add(rateLine, useLine, limit) // the limit's dashes over the usage where it touches them
	p.Legend.Add("requests per second", rateLine)
	if info.upstream {
		p.Legend.Add("requests in the trailing minute, as the upstream counts them", useLine)
	} else {
		p.Legend.Add("requests sent in the trailing minute (client side)", useLine)
	}
	p.Legend.Add(limitLabel, limit)
	if len(s.refused) > 0 {
		marks := make(plotter.XYs, len(s.refused))
		for i, r := range s.refused {
			marks[i] = plotter.XY{X: r.X, Y: r.Y}
		}
		sc, err := plotter.NewScatter(marks)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Shape: draw.CircleGlyph{}, Color: color.RGBA{R: 235, G: 110, A: 255}, Radius: vg.Points(3.5)}
		p.Add(sc)
		p.Legend.Add(refusedLabel, sc)
	}
	return p, nil
}
