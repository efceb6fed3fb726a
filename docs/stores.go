package docs

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func layered() error {
	store, err := cache.NewMemory(cache.MemoryConfig{}) // or a Redis store shared by processes
	if err != nil {
		return err
	}
	defer store.Close()
	hourly, err := ratemonitor.New(http.DefaultTransport, ratemonitor.WithStore(store),
		ratemonitor.WithRules(strategy.Rule{Limit: 1000, Window: time.Hour}))
	if err != nil {
		return err
	}
	minutely, err := ratemonitor.New(hourly, ratemonitor.WithStore(store),
		ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}))
	if err != nil {
		return err // cache.ErrCounterConflict if these rules would split a count (below)
	}
	client := &http.Client{Transport: minutely}
	_ = client
	return errors.Join(minutely.Close(), hourly.Close())
}

func dynamo(ctx context.Context, awsCfg aws.Config) (*dynamostore.Store, error) {
	client := dynamodb.NewFromConfig(awsCfg) // or dynamostore.EndpointClient("http://127.0.0.1:8000")
	store, err := dynamostore.OpenOrCreate(ctx, client, dynamostore.Options{Table: "ratemonitor"})
	if err != nil {
		return nil, err
	}
	return store, nil
}

// tallyStore is a store of one's own (docs/stores.md#a-store-of-your-own): the Store methods
// come from the store it wraps, and its Sharing is its own.
type tallyStore struct {
	cache.Store // Record, Reserve, Release, Peek, Close
	sharing     cache.Sharing
}

// Describe gives the Transports over the store its Sharing: one alone on it sends each
// request as it is, and rules that would split a count are refused.
func (s *tallyStore) Describe() cache.Traits {
	return cache.Traits{Sharing: &s.sharing}
}
