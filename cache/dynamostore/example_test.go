package dynamostore_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// Lambdas or containers that call one API share their counts in a DynamoDB table. The client
// makes one attempt per call (RetryMaxAttempts: 1): a write whose answer was lost must not
// be sent again, since it may have counted; the store retries its conditional writes itself.
// In AWS, build the client from config.LoadDefaultConfig with the same setting. The store
// does not take the upstream's figures (WithSync needs a cache.Syncer: the memory and Redis
// stores).
func ExampleNew() {
	client := dynamodb.New(dynamodb.Options{
		Region:           "eu-west-1",
		Credentials:      credentials.NewStaticCredentialsProvider("AKIA…", "secret", ""),
		RetryMaxAttempts: 1,
	})
	store, err := dynamostore.New(client, dynamostore.Options{
		Table:       "ratelimits",  // partition key pk, a string (CreateTable makes one)
		IdleTimeout: 2 * time.Hour, // idle keys' items expire (with EnableTTL)
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := store.Check(ctx); err != nil { // New makes no request: find a missing table now
		log.Fatal(err)
	}

	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithRules(
			strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second},
			// A day counted in 10 s buckets: a DynamoDB item holds at most 350 KB of
			// state, and New refuses rules whose state could grow past it.
			strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithPacing(),
		ratemonitor.WithStore(store))
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	xero := &http.Client{Transport: tr} // share it
	req, err := http.NewRequest(http.MethodGet, "https://api.xero.com/api.xro/2.0/Invoices", nil)
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Xero-Tenant-Id", "tenant-id")
	resp, err := xero.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
}

// OpenOrCreate creates the table when it does not exist, for development against dynalite or
// DynamoDB Local (EndpointClient) and for programs allowed to create tables.
func ExampleOpenOrCreate() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := dynamostore.EndpointClient("http://127.0.0.1:8000")
	store, err := dynamostore.OpenOrCreate(ctx, client, dynamostore.Options{Table: "ratelimits-dev"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := dynamostore.EnableTTL(ctx, client, "ratelimits-dev"); err != nil { // DynamoDB only: dynalite has no TTL
		log.Print(err)
	}

	s, err := rollingwindow.New(strategy.Rule{Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	l, err := middleware.New(store, s)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(":8080", l.Wrap(http.NotFoundHandler())))
}
