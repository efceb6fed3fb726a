module github.com/ratemonitor/ratemonitor

go 1.26.0

require (
	github.com/dgraph-io/ristretto/v2 v2.4.2
	github.com/dunglas/httpsfv v1.1.2
	github.com/eko/gocache/lib/v4 v4.3.0
	github.com/eko/gocache/store/ristretto/v4 v4.3.2
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/realclientip/realclientip-go v1.0.0
	go.uber.org/goleak v1.3.0
	golang.org/x/time v0.16.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/exp v0.0.0-20251209150349-8475f28825e9 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
