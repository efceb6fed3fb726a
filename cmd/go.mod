module github.com/ratemonitor/ratemonitor/cmd

go 1.26.0

require (
	github.com/prometheus/client_golang v1.23.2
	github.com/ratemonitor/ratemonitor v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/cache/dynamostore v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/cache/redisstore v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/cache/sqlitestore v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/metrics v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/aws/aws-sdk-go-v2 v1.48.0 // indirect
	github.com/aws/aws-sdk-go-v2/credentials v1.21.1 // indirect
	github.com/aws/aws-sdk-go-v2/internal/configsources v1.5.12 // indirect
	github.com/aws/aws-sdk-go-v2/internal/endpoints/v2 v2.8.12 // indirect
	github.com/aws/aws-sdk-go-v2/service/dynamodb v1.74.0 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/accept-encoding v1.13.25 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/endpoint-discovery v1.13.12 // indirect
	github.com/aws/smithy-go v1.28.9 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgraph-io/ristretto/v2 v2.4.2 // indirect
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/eko/gocache/lib/v4 v4.3.0 // indirect
	github.com/eko/gocache/store/ristretto/v4 v4.3.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.67.4 // indirect
	github.com/prometheus/procfs v0.19.2 // indirect
	github.com/realclientip/realclientip-go v1.0.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v2 v2.4.3 // indirect
	golang.org/x/exp v0.0.0-20251209150349-8475f28825e9 // indirect
	golang.org/x/sys v0.49.0 // indirect
	google.golang.org/protobuf v1.36.10 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.62.0 // indirect
)

replace github.com/ratemonitor/ratemonitor => ..

replace github.com/ratemonitor/ratemonitor/cache/redisstore => ../cache/redisstore

replace github.com/ratemonitor/ratemonitor/cache/sqlitestore => ../cache/sqlitestore

replace github.com/ratemonitor/ratemonitor/cache/dynamostore => ../cache/dynamostore

replace github.com/ratemonitor/ratemonitor/metrics => ../metrics
