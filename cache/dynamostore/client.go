package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// EndpointClient returns a DynamoDB client for the API at endpoint (a URL such as
// https://dynamodb.eu-west-1.amazonaws.com, or http://127.0.0.1:8000 for dynalite or DynamoDB
// Local), for command-line tools. Credentials come from AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or are placeholders when those are unset (local
// servers accept any); the region from AWS_REGION, or us-east-1. The SDK makes one attempt per
// call: the store retries conditional writes itself. Programs that run in AWS should build
// their client with the SDK's config.LoadDefaultConfig instead.
func EndpointClient(endpoint string) *dynamodb.Client {
	creds := credentials.NewStaticCredentialsProvider(
		cmp.Or(os.Getenv("AWS_ACCESS_KEY_ID"), "placeholder"),
		cmp.Or(os.Getenv("AWS_SECRET_ACCESS_KEY"), "placeholder"),
		os.Getenv("AWS_SESSION_TOKEN"))
	return dynamodb.New(dynamodb.Options{
		Region:           cmp.Or(os.Getenv("AWS_REGION"), "us-east-1"),
		Credentials:      creds,
		BaseEndpoint:     aws.String(endpoint),
		RetryMaxAttempts: 1,
	})
}

// OpenOrCreate is New followed by Check, creating the table with CreateTable when it does not
// exist (it does not enable TTL: see EnableTTL), and waiting for it to be active. Processes
// starting at once may all call it: a table another one is creating is waited for. Errors
// are New's, Check's and CreateTable's.
func OpenOrCreate(ctx context.Context, client *dynamodb.Client, opts Options) (*Store, error) {
	st, err := New(client, opts)
	if err != nil {
		return nil, err
	}
	status, err := st.describe(ctx)
	var nf *types.ResourceNotFoundException
	switch {
	case errors.As(err, &nf):
		err = createTable(ctx, client, opts.Table, true)
	case err == nil && status != types.TableStatusActive:
		err = waitActive(ctx, client, opts.Table)
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}
