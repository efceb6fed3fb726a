module github.com/ratemonitor/ratemonitor/examples

go 1.26.0

require (
	github.com/ratemonitor/ratemonitor v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/cache/redisstore v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgraph-io/ristretto/v2 v2.4.2 // indirect
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/eko/gocache/lib/v4 v4.3.0 // indirect
	github.com/eko/gocache/store/ristretto/v4 v4.3.2 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/exp v0.0.0-20251209150349-8475f28825e9 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/ratemonitor/ratemonitor => ..

replace github.com/ratemonitor/ratemonitor/cache/redisstore => ../cache/redisstore
