//go:build dynamodb

package main

import (
	"context"
	"fmt"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
)

// Built with -tags dynamodb, -dynamodb-endpoint keeps the counts in DynamoDB.
func init() {
	openDynamo = func(ctx context.Context, cfg config) (cache.Store, error) {
		st, err := dynamostore.OpenOrCreate(ctx, dynamostore.EndpointClient(cfg.dynamoEndpoint), dynamostore.Options{Table: cfg.dynamoTable})
		if err != nil {
			return nil, fmt.Errorf("-dynamodb-endpoint %s -dynamodb-table %s: %w", cfg.dynamoEndpoint, cfg.dynamoTable, err)
		}
		return st, nil
	}
}
