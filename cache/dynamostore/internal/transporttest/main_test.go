package transporttest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore/dynalitetest"
	"github.com/ratemonitor/ratemonitor/internal/transportcheck"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
)

// TestMain checks that the tests leave no goroutine behind, but the AWS SDK's HTTP clients'
// idle keep-alive connections (their read and write loops), which the SDK never closes.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
}

// dynamoStore starts dynalite, creates a table and returns a DynamoDB store on it with opts
// (Table filled in). Its HTTP connections are closed when the test ends.
func dynamoStore(t *testing.T, opts dynamostore.Options) *dynamostore.Store {
	return faultyDynamoStore(t, opts, nil)
}

// faultyDynamoStore is dynamoStore whose DynamoDB calls go through fault, when not nil: it is
// given each call's request and operation ("UpdateItem", "GetItem") and answers it, or returns
// nil to let the server answer.
func faultyDynamoStore(t *testing.T, opts dynamostore.Options, fault func(r *http.Request, op string) *http.Response) *dynamostore.Store {
	t.Helper()
	srv := dynalitetest.Start(t)
	hc := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(hc.CloseIdleConnections)
	var rt http.RoundTripper = hc
	if fault != nil {
		rt = upstreamtest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if resp := fault(r, strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")); resp != nil {
				if r.Body != nil {
					r.Body.Close()
				}
				resp.Request = r
				return resp, nil
			}
			return hc.RoundTrip(r)
		})
	}
	c := dynamodb.New(dynamodb.Options{
		Region:           "us-east-1",
		Credentials:      credentials.NewStaticCredentialsProvider("dummy", "dummy", ""),
		BaseEndpoint:     aws.String(srv.Endpoint),
		RetryMaxAttempts: 1,
		HTTPClient:       &http.Client{Transport: rt},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts.Table = "ratelimits"
	if err := dynamostore.CreateTable(ctx, c, opts.Table); err != nil {
		t.Fatal(err)
	}
	st, err := dynamostore.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// conditionFailed is DynamoDB's answer to a conditional write whose condition failed: what
// another writer coming first looks like to the store.
func conditionFailed() *http.Response {
	return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:   io.NopCloser(strings.NewReader(`{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}`))}
}

// usedOf is internal/transportcheck's, under the name these tests use.
var usedOf = transportcheck.UsedOf

func newTransport(t *testing.T, base http.RoundTripper, opts ...ratemonitor.Option) *ratemonitor.Transport {
	t.Helper()
	return transportcheck.New(t, ratemonitor.New, base, opts...)
}
