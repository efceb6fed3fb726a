package dynamostore

import (
	"context"
	"sync"
	"testing"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore/internal/dynalite"
)

// TestOpenOrCreateRaceAllSucceed: four processes starting at once on a table that does not exist
// all open it without an error.
func TestOpenOrCreateRaceAllSucceed(t *testing.T) {
	srv, _ := server(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		c := dynalite.NewClient(srv.Endpoint)
		wg.Go(func() {
			st, err := OpenOrCreate(context.Background(), c, Options{Table: "fresh"})
			if err == nil {
				st.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d: %v", i, err)
		}
	}
}
