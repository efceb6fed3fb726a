package rollinglog

import (
	"flag"
	"runtime"
	"testing"
	"time"
)

// logShape is a log in a given state, for the heap and speed figures: a window, a granularity
// and how many live buckets it holds (one request per granule up to the latest instant).
type logShape struct {
	name    string
	w, g    time.Duration
	buckets int
}

var shapes = []logShape{
	{"60per1m-60buckets", time.Minute, time.Second, 60},
	{"day-24min-60buckets", 24 * time.Hour, 24 * time.Minute, 60},
	{"day-1s-5000buckets", 24 * time.Hour, time.Second, 5000},
}

// anyLog is what the figures need of the Log and of the reference log it replaced.
type anyLog interface {
	Add(now time.Time, n int)
	Remove(at time.Time, n int)
	Used(now time.Time) int
	WaitTime(now time.Time, n, limit int) time.Duration
}

// fill makes a log of shape s: s.buckets buckets, the newest at epoch + (s.buckets−1)·g.
func (s logShape) fill(epoch time.Time) *Log {
	l := NewLog(s.w, s.g)
	fillLog(l, s, epoch)
	return l
}

func fillLog(l anyLog, s logShape, epoch time.Time) {
	for i := range s.buckets {
		l.Add(epoch.Add(time.Duration(i)*s.g), 1)
	}
}

// impls makes a log of either implementation, for figures side by side.
var impls = []struct {
	name string
	mk   func(s logShape) anyLog
}{
	{"compact", func(s logShape) anyLog { return s.fill(benchEpoch) }},
	{"before", func(s logShape) anyLog { r := newRefLog(s.w, s.g); fillLog(r, s, benchEpoch); return r }},
}

var benchEpoch = time.Unix(1_800_000_000, 0)

// heapPerLog returns the heap bytes per log measured around making n logs with mk.
func heapPerLog[L any](n int, mk func() L) float64 {
	keep := make([]L, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = mk()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

var figures = flag.Bool("figures", false, "log the heap per log in each shape, compact and as before (TestBytesPerLogFigures)")

// TestBytesPerLogFigures logs the heap of one log in each shape, compact and as before:
//
//	go test -run Figures -v ./internal/rollinglog -figures
func TestBytesPerLogFigures(t *testing.T) {
	if !*figures {
		t.Skip("figures only: run with -figures")
	}
	for _, s := range shapes {
		n := 10_000
		if s.buckets > 1000 {
			n = 1000
		}
		var got [2]float64
		for i, im := range impls {
			got[i] = heapPerLog(n, func() anyLog { return im.mk(s) })
		}
		t.Logf("%s: %.0f bytes per log (Cost %d), before %.0f: %.2fx smaller", s.name, got[0], s.fill(benchEpoch).Cost(), got[1], got[1]/got[0])
	}
}

// BenchmarkLog measures the fast paths on a log of each shape, compact and as before: Add in
// the newest bucket, Used and WaitTime with no excess, at an instant in the newest granule; and
// Add with a clock that moves on.
func BenchmarkLog(b *testing.B) {
	for _, s := range shapes {
		at := benchEpoch.Add(time.Duration(s.buckets-1) * s.g)
		for _, im := range impls {
			b.Run(s.name+"/Add/"+im.name, func(b *testing.B) {
				l := im.mk(s)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					l.Add(at, 1)
					// Keep the count realistic (a compact bucket holds up to 65 535): one
					// Remove every 50 000 Adds.
					if i++; i == 50_000 {
						l.Remove(at, i)
						i = 0
					}
				}
			})
			b.Run(s.name+"/Used/"+im.name, func(b *testing.B) {
				l := im.mk(s)
				b.ReportAllocs()
				var u int
				for b.Loop() {
					u += l.Used(at)
				}
				_ = u
			})
			b.Run(s.name+"/WaitTime/"+im.name, func(b *testing.B) {
				l := im.mk(s)
				b.ReportAllocs()
				var d time.Duration
				for b.Loop() {
					d += l.WaitTime(at, 1, 1<<30)
				}
				_ = d
			})
		}
	}
	// A new bucket every 1000 calls, the oldest expiring.
	for _, im := range impls {
		b.Run("60per1m-moving/Add/"+im.name, func(b *testing.B) {
			l := im.mk(shapes[0])
			t := benchEpoch.Add(time.Minute)
			b.ReportAllocs()
			for b.Loop() {
				t = t.Add(time.Millisecond)
				l.Add(t, 1)
			}
		})
	}
}
