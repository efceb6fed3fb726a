module github.com/ratemonitor/ratemonitor/docs

go 1.26.0

require (
	github.com/aws/aws-sdk-go-v2 v1.48.0
	github.com/aws/aws-sdk-go-v2/service/dynamodb v1.74.0
	github.com/prometheus/client_golang v1.23.2
	github.com/ratemonitor/ratemonitor v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/cache/dynamostore v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/cache/redisstore v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/cache/sqlitestore v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/metrics v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
)

replace github.com/ratemonitor/ratemonitor => ..

replace github.com/ratemonitor/ratemonitor/cache/redisstore => ../cache/redisstore

replace github.com/ratemonitor/ratemonitor/cache/sqlitestore => ../cache/sqlitestore

replace github.com/ratemonitor/ratemonitor/cache/dynamostore => ../cache/dynamostore

replace github.com/ratemonitor/ratemonitor/metrics => ../metrics

replace github.com/ratemonitor/ratemonitor/internal/redistest => ../internal/redistest

replace github.com/ratemonitor/ratemonitor/internal/dynalitetest => ../internal/dynalitetest
