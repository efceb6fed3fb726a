module github.com/ratemonitor/ratemonitor/cache/dynamostore

go 1.26.0

require (
	github.com/aws/aws-sdk-go-v2 v1.48.0
	github.com/aws/aws-sdk-go-v2/credentials v1.21.0
	github.com/aws/aws-sdk-go-v2/service/dynamodb v1.74.0
	github.com/ratemonitor/ratemonitor v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/internal/dynalitetest v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
)

replace github.com/ratemonitor/ratemonitor => ../..

replace github.com/ratemonitor/ratemonitor/internal/dynalitetest => ../../internal/dynalitetest
