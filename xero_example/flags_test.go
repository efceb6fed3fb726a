package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestFlagsRefuseBadValues(t *testing.T) {
	bad := [][]string{
		{"-scale", "0"}, {"-burst", "61"}, {"-burst", "0"}, {"-requests", "0"}, {"-tenants", "0"},
		{"-upstream-window", "sliding"}, {"-margin", "-1s"},
		{"-base-url", "https://api.xero.com", "-scale", "1"},
		{"-base-url", "https://api.xero.com", "-token", "t", "-tenant-ids", "x"},
		{"-scale", "NaN"}, {"-scale", "101"}, {"-progress", "-1s"}, {"-tenant-ids", "x"}, {"stray"},
		{"-base-url", "ftp://x", "-token", "t", "-tenant-ids", "a", "-scale", "1"},
		{"-concurrency", "0"}, {"-concurrency", "61"}, {"-in-flight", "-1"}, {"-latency", "-1s"},
		{"-dynamodb-endpoint", "http://127.0.0.1:1", "-in-flight", "5"},
		{"-foreign", "-1"}, {"-foreign", "61"}, {"-foreign", "5", "-base-url", "https://api.xero.com", "-token", "t", "-tenant-ids", "a", "-scale", "1"},
	}
	for _, args := range bad {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
				t.Errorf("%v accepted", args)
			}
		})
	}
	if c, err := parseFlags([]string{"-dynamodb-endpoint", "http://127.0.0.1:1"}, &bytes.Buffer{}); err != nil || c.inFlight != 0 || c.concurrency != 5 {
		t.Errorf("-dynamodb-endpoint: in-flight %d, concurrency %d, %v, want 0 and 5 (no leases there)", c.inFlight, c.concurrency, err)
	}
	if c, err := parseFlags(nil, &bytes.Buffer{}); err != nil || c.inFlight != 5 || c.concurrency != 10 {
		t.Errorf("defaults: in-flight %d, concurrency %d, %v, want 5 and 10", c.inFlight, c.concurrency, err)
	}
	c, err := parseFlags([]string{"-base-url", "https://api.xero.com", "-token", "t", "-tenant-ids", "x, y", "-scale", "1"}, &bytes.Buffer{})
	if err != nil || len(c.tenantIDs) != 2 || c.tenantIDs[1] != "y" {
		t.Errorf("real API flags: %+v %v", c, err)
	}
}
