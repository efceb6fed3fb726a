module github.com/ratemonitor/ratemonitor/cache/redisstore

go 1.26.0

require (
	github.com/ratemonitor/ratemonitor v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/internal/redistest v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
)

replace github.com/ratemonitor/ratemonitor => ../..

replace github.com/ratemonitor/ratemonitor/internal/redistest => ../../internal/redistest
