package storetest

import (
	"slices"
	"sync"
	"time"
)

// GrantLog keeps the instant of every slot a store granted, less the slots taken back: the
// instants a strict model of a rule judges. The zero value is empty and ready; it is safe for
// concurrent use.
type GrantLog struct {
	mu sync.Mutex
	at []time.Time
}

// Granted notes n slots granted at at.
func (g *GrantLog) Granted(at time.Time, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for range n {
		g.at = append(g.at, at)
	}
}

// Released takes back n slots granted at at; slots never noted are ignored.
func (g *GrantLog) Released(at time.Time, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for range n {
		if i := slices.IndexFunc(g.at, at.Equal); i >= 0 {
			g.at = slices.Delete(g.at, i, i+1)
		}
	}
}

// Instants returns the instants of the slots held, in order.
func (g *GrantLog) Instants() []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	at := slices.Clone(g.at)
	slices.SortFunc(at, time.Time.Compare)
	return at
}
