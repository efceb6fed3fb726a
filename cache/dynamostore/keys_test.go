package dynamostore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestLongKeyAccepted: a key longer than DynamoDB's 2048-byte partition key limit is admitted
// all the same.
func TestLongKeyAccepted(t *testing.T) {
	_, c := server(t)
	st := newStore(t, c, Options{})
	s := must(fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Minute}))
	key := strings.Repeat("k", 2048-len(keyPrefix)+1)
	_, err := st.Admit(context.Background(), s, key, 1)
	if err != nil {
		t.Errorf("a key of %d bytes: %v", len(key), err)
	}
}

// TestInvalidUTF8KeysCountApart: distinct keys with invalid UTF-8 must not share a count.
func TestInvalidUTF8KeysCountApart(t *testing.T) {
	_, c := server(t)
	st := newStore(t, c, Options{})
	ctx := context.Background()
	s := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Hour}))
	d1, err := st.Admit(ctx, s, "tenant-\xff", 1)
	if err != nil || !d1.Allowed {
		t.Fatal(d1, err)
	}
	d2, err := st.Admit(ctx, s, "tenant-\xfe", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !d2.Allowed {
		t.Errorf("key %q was refused by key %q's count: %+v", "tenant-\xfe", "tenant-\xff", d2)
	}
}
