package rollingwindow

import (
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

// fill makes a log of shape s: s.buckets buckets, the newest at epoch + (s.buckets−1)·g.
func (s logShape) fill(epoch time.Time) *Log {
	l := NewLog(s.w, s.g)
	for i := range s.buckets {
		l.Add(epoch.Add(time.Duration(i)*s.g), 1)
	}
	return l
}

var benchEpoch = time.Unix(1_800_000_000, 0)

// heapPerLog returns the heap bytes per log measured around making n logs with mk.
func heapPerLog(n int, mk func() *Log) float64 {
	keep := make([]*Log, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = mk()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// TestBytesPerLogFigures logs the heap of one log in each shape (go test -run Figures -v).
func TestBytesPerLogFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	for _, s := range shapes {
		n := 10_000
		if s.buckets > 1000 {
			n = 1000
		}
		got := heapPerLog(n, func() *Log { return s.fill(benchEpoch) })
		t.Logf("%s: %.0f bytes per log (Cost %d)", s.name, got, s.fill(benchEpoch).Cost())
	}
}

// BenchmarkLog measures the fast paths on a log of each shape: Add in the newest bucket, Used
// and WaitTime with no excess, at an instant in the newest granule.
func BenchmarkLog(b *testing.B) {
	for _, s := range shapes {
		at := benchEpoch.Add(time.Duration(s.buckets-1) * s.g)
		b.Run(s.name+"/Add", func(b *testing.B) {
			l := s.fill(benchEpoch)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l.Add(at, 1)
				// Keep the count realistic (a compact bucket holds up to 65 535): one Remove
				// every 50 000 Adds.
				if i++; i == 50_000 {
					l.Remove(at, i)
					i = 0
				}
			}
		})
		b.Run(s.name+"/Used", func(b *testing.B) {
			l := s.fill(benchEpoch)
			b.ReportAllocs()
			var u int
			for b.Loop() {
				u += l.Used(at)
			}
			_ = u
		})
		b.Run(s.name+"/WaitTime", func(b *testing.B) {
			l := s.fill(benchEpoch)
			b.ReportAllocs()
			var d time.Duration
			for b.Loop() {
				d += l.WaitTime(at, 1, 1<<30)
			}
			_ = d
		})
	}
	// Add with a clock that moves on: a new bucket every 1000 calls, the oldest expiring.
	b.Run("60per1m-moving/Add", func(b *testing.B) {
		l := shapes[0].fill(benchEpoch)
		t := benchEpoch.Add(time.Minute)
		b.ReportAllocs()
		for b.Loop() {
			t = t.Add(time.Millisecond)
			l.Add(t, 1)
		}
	})
}
