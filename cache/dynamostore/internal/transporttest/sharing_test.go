package transporttest

import (
	"testing"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/internal/stacktest"
)

// TestAloneOnItsStoreSendsTheRequestItself: a Transport alone on a DynamoDB Store value sends
// the request unmarked (each Store value has its own cache.Sharing); with a second one, marked.
func TestAloneOnItsStoreSendsTheRequestItself(t *testing.T) {
	stacktest.AloneOnItsStoreSendsTheRequestItself(t, func() cache.Store {
		return dynamoStore(t, dynamostore.Options{})
	})
}
