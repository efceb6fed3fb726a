module github.com/ratemonitor/ratemonitor/cache/sqlitestore

go 1.26.0

require (
	github.com/ratemonitor/ratemonitor v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
)

replace github.com/ratemonitor/ratemonitor => ../..
