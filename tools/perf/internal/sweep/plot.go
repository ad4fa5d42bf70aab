package sweep

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// panel is one chart of a plot: two series against a log2 x axis.
type panel struct {
	title, xlabel, ylabel string
	points                []Point
	logY                  bool
}

const (
	panelW, panelH = 640, 300
	marginL        = 70
	marginR        = 20
	marginT        = 36
	marginB        = 48
)

// WritePlot writes the sweep as an SVG picture: bandwidth and latency
// against message size, and bandwidth against QP count, goroce and TCP.
func WritePlot(w io.Writer, r *Result, title string) error {
	panels := []panel{
		{"Bandwidth against message size (1 QP)", "message size [bytes]", "MiB/s", r.BWBySize, false},
		{"Latency against message size (t_typical, one way)", "message size [bytes]", "µs", r.LatBySize, true},
		{"Aggregate bandwidth against QP count", "QPs (TCP: streams)", "MiB/s", r.BWByQPs, false},
	}
	var b strings.Builder
	h := 40 + len(panels)*panelH
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", panelW, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="24" font-size="15" text-anchor="middle">%s</text>`+"\n", panelW/2, esc(title))
	for i, p := range panels {
		p.draw(&b, 40+i*panelH)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// sizeLabel is 2, 64, 2K, 1M…
func sizeLabel(x int) string {
	switch {
	case x >= 1<<20 && x%(1<<20) == 0:
		return fmt.Sprintf("%dM", x>>20)
	case x >= 1<<10 && x%(1<<10) == 0:
		return fmt.Sprintf("%dK", x>>10)
	}
	return fmt.Sprint(x)
}

func (p panel) draw(b *strings.Builder, top int) {
	if len(p.points) == 0 {
		return
	}
	x0, x1 := marginL, panelW-marginR
	y0, y1 := top+panelH-marginB, top+marginT
	lx := func(x int) float64 { return math.Log2(float64(x)) }
	minX, maxX := lx(p.points[0].X), lx(p.points[len(p.points)-1].X)
	if maxX == minX {
		maxX = minX + 1
	}
	minY, maxY := math.Inf(1), 0.0
	for _, pt := range p.points {
		for _, v := range []float64{pt.Goroce, pt.TCP} {
			if v > 0 {
				minY, maxY = math.Min(minY, v), math.Max(maxY, v)
			}
		}
	}
	if math.IsInf(minY, 1) {
		minY, maxY = 1, 1 // no point above zero (every run failed): an axis from 1
	}
	fy := func(v float64) float64 { return v }
	if p.logY {
		fy = func(v float64) float64 { return math.Log10(math.Max(v, 1e-3)) }
		minY, maxY = math.Floor(math.Log10(minY)), math.Ceil(math.Log10(maxY))
	} else {
		top := maxY * 1.05
		if math.IsInf(top, 0) {
			top = maxY // at the float's limit: no headroom
		}
		minY, maxY = 0, niceCeil(top)
	}
	if maxY <= minY {
		maxY = minY + 1
	}
	px := func(x int) float64 { return float64(x0) + (lx(x)-minX)/(maxX-minX)*float64(x1-x0) }
	py := func(v float64) float64 { return float64(y0) - (fy(v)-minY)/(maxY-minY)*float64(y0-y1) }
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", x0, top+20, esc(p.title))
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, y0, x1, y0, x0, y0, x0, y1)
	// y grid and labels: a linear axis in quarters, a log axis at 1, 2 and
	// 5 times each power of ten
	grid := func(v float64, label string) {
		y := float64(y0) - (v-minY)/(maxY-minY)*float64(y0-y1)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0, y, x1, y, x0-6, y+4, label)
	}
	if p.logY {
		for d := minY; d <= maxY; d++ {
			for _, m := range []float64{1, 2, 5} {
				if v := d + math.Log10(m); v <= maxY {
					grid(v, fmt.Sprintf("%g", m*math.Pow(10, d)))
				}
			}
		}
	} else {
		for i := 0; i <= 4; i++ {
			v := minY + (maxY-minY)*(float64(i)/4)
			grid(v, fmt.Sprintf("%.0f", v))
		}
	}
	// x labels: every other point when crowded
	step := 1
	if len(p.points) > 12 {
		step = 2
	}
	for i, pt := range p.points {
		if i%step == 0 {
			fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px(pt.X), y0+16, sizeLabel(pt.X))
		}
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, y0+34, esc(p.xlabel))
	fmt.Fprintf(b, `<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)">%s</text>`+"\n", (y0+y1)/2, (y0+y1)/2, esc(p.ylabel))
	series := []struct {
		name, color string
		v           func(Point) float64
	}{{"goroce", "#1f6fd0", func(p Point) float64 { return p.Goroce }}, {"TCP", "#888", func(p Point) float64 { return p.TCP }}}
	for k, s := range series {
		var pts []string
		for _, pt := range p.points {
			if v := s.v(pt); v > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(pt.X), py(v)))
			}
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			x1-120+k*60, top+16, x1-104+k*60, top+16, s.color, x1-100+k*60, top+20, s.name)
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if r := m * p; r >= v {
			if math.IsInf(r, 0) {
				return v
			}
			return r
		}
	}
	return v
}
