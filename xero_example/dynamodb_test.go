//go:build dynamodb

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore/dynalitetest"
)

// TestRunOnDynamoDBNo429: the main job with its counts in DynamoDB (the test's own dynalite); the
// example creates the table.
func TestRunOnDynamoDBNo429(t *testing.T) {
	srv := dynalitetest.Start(t)
	cfg, err := parseFlags([]string{"-scale", "60", "-progress", "0", "-dynamodb-endpoint", srv.Endpoint, "-dynamodb-table", "xero",
		"-tenants", "2", "-requests", "100", "-margin", "60s"}, &bytes.Buffer{})
	// A reserved slot counts from its reservation, and a burst of 10 is sent one request after
	// another over dynalite: the margin, 60 s of Xero time (1 s real), covers that on a loaded
	// 2-core machine running -race (100 ms did not; 300 ms did, idle).
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sum, err := run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if sum.sent != 200 || sum.tooMany != 0 || sum.failed != 0 || !strings.Contains(out.String(), "counts kept in DynamoDB") {
		t.Fatalf("sent %d, 429s %d, failures %d\n%s", sum.sent, sum.tooMany, sum.failed, out.String())
	}
	cfg.dynamoEndpoint = "http://127.0.0.1:1"
	if _, err := run(context.Background(), cfg, &out); err == nil || !strings.Contains(err.Error(), "-dynamodb-endpoint http://127.0.0.1:1") {
		t.Errorf("an unreachable -dynamodb-endpoint: %v", err)
	}
}
