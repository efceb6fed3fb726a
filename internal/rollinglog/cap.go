package rollinglog

import "time"

// Cap makes every request the log holds stop counting at until at the latest: what an upstream
// that counts in fixed windows frees at its reset (engine.Report.Fixed). A bucket that would
// count past until is dated until − W, so that it stops counting exactly then; buckets that
// land in one granule merge. With until at or before the log's latest instant, the log is
// emptied. The log's latest instant does not move.
func (l *Log) Cap(until time.Time) {
	if l.size == 0 {
		return
	}
	u := until.UnixNano()
	if u <= l.hw {
		l.total, l.size = 0, 0
		return
	}
	type rec struct{ latest, count int64 }
	var small [8]rec
	recs := small[:0]
	for i := range int(l.size) {
		latest, count := l.get(l.slot(i))
		recs = append(recs, rec{min(latest, u-l.window), count})
	}
	l.total, l.size = 0, 0
	for _, r := range recs {
		if r.count != 0 {
			l.add(r.latest, r.count)
		}
	}
}
