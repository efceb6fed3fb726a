package headers

import (
	"encoding/base64"
	"reflect"
	"testing"
	"time"
)

// b64 decodes a Byte Sequence's base64 as the draft writes it between colons.
func b64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestParseIETFReadsDraft11Examples: every field example of draft-ietf-httpapi-ratelimit-headers-11
// (sections 3, 3.2, 4, 4.2 and appendix B.2) read to the exact values the draft states,
// quota unit (qu) and partition key (pk) included.
// https://www.ietf.org/archive/id/draft-ietf-httpapi-ratelimit-headers-11.html
func TestParseIETFReadsDraft11Examples(t *testing.T) {
	for _, c := range []struct {
		name string
		kv   []string
		want []Policy
	}{
		{"section 3: two policies", []string{"RateLimit-Policy", `"burst";q=100;w=60,"daily";q=1000;w=86400`}, []Policy{
			{Name: "burst", Quota: 100, Window: time.Minute, Remaining: Unknown, Reset: Unknown},
			{Name: "daily", Quota: 1000, Window: 24 * time.Hour, Remaining: Unknown, Reset: Unknown},
		}},
		{"section 3.2: window", []string{"RateLimit-Policy", `"default";q=100;w=10`}, []Policy{
			{Name: "default", Quota: 100, Window: 10 * time.Second, Remaining: Unknown, Reset: Unknown},
		}},
		{"section 3.2: partition key", []string{"RateLimit-Policy", `"peruser";q=100;w=60;pk=:cHsdsRa894==:`}, []Policy{
			{Name: "peruser", Quota: 100, Window: time.Minute, Partition: b64(t, "cHsdsRa894=="), Remaining: Unknown, Reset: Unknown},
		}},
		{"section 3.2: partition key and quota unit", []string{"RateLimit-Policy", `"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`}, []Policy{
			{Name: "peruser", Quota: 65535, Unit: "content-bytes", Window: 10 * time.Second, Partition: b64(t, "sdfjLJUOUH=="), Remaining: Unknown, Reset: Unknown},
		}},
		{"section 4.2: available quota and effective window", []string{"RateLimit", `"default";r=50;t=30`}, []Policy{
			{Name: "default", Quota: Unknown, Remaining: 50, Reset: 30 * time.Second},
		}},
		{"section 4.2: partition key, no window", []string{"RateLimit", `"default";r=999;pk=:dHJpYWwxMjEzMjM=:`}, []Policy{
			{Name: "default", Quota: Unknown, Partition: "trial121323", Remaining: 999, Reset: Unknown},
		}},
		{"section 4.2: 300 MB for an application", []string{"RateLimit", `"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:`}, []Policy{
			{Name: "default", Quota: Unknown, Partition: "App-999", Remaining: 300000000, Reset: time.Minute},
		}},
		{"B.2.1: fixed window", []string{"RateLimit", `"fixedwindow";r=99;t=50`, "RateLimit-Policy", `"fixedwindow";q=100;w=60`}, []Policy{
			{Name: "fixedwindow", Quota: 100, Window: time.Minute, Remaining: 99, Reset: 50 * time.Second},
		}},
		{"B.2.3: pushed back", []string{"RateLimit-Policy", `"dynamic";q=15;w=20`, "RateLimit", `"dynamic";r=0;t=20`}, []Policy{
			{Name: "dynamic", Quota: 15, Window: 20 * time.Second, Remaining: 0, Reset: 20 * time.Second},
		}},
		{"concurrent-requests", []string{"RateLimit-Policy", `"conc";q=4;qu="concurrent-requests"`}, []Policy{
			{Name: "conc", Quota: 4, Unit: "concurrent-requests", Remaining: Unknown, Reset: Unknown},
		}},
		// RateLimit's pk is the request's own: it wins over the policy's.
		{"pk in both", []string{"RateLimit-Policy", `"p";q=5;w=1;pk=:YQ==:`, "RateLimit", `"p";r=4;t=1;pk=:Yg==:`}, []Policy{
			{Name: "p", Quota: 5, Window: time.Second, Partition: "b", Remaining: 4, Reset: time.Second},
		}},
		// Malformed members are ignored whole (section 7): qu must be a String, pk a Byte Sequence.
		{"malformed qu and pk skipped", []string{"RateLimit-Policy", `"a";q=1;qu=requests, "b";q=2;pk="x", "c";q=3;w=1`, "RateLimit", `"c";r=1;pk=2`}, []Policy{
			{Name: "c", Quota: 3, Window: time.Second, Remaining: Unknown, Reset: Unknown},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ParseIETF(hdr(c.kv...)); !reflect.DeepEqual(got, c.want) {
				t.Errorf("ParseIETF(%q)\n got %+v\nwant %+v", c.kv, got, c.want)
			}
		})
	}
}
