package middlewaretest

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/internal/handlertest"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The handler helpers of internal/handlertest, under the names these tests use.
type counting = handlertest.Counting

var (
	must  = handlertest.Must[*engine.Strategy]
	serve = handlertest.Serve
)
