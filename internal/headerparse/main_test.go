package headerparse

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running (GitHubSecondaryWithin
// starts one per call).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
