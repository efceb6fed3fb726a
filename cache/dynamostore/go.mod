module github.com/ratemonitor/ratemonitor/cache/dynamostore

go 1.26.0

require (
	github.com/ratemonitor/ratemonitor v0.0.0-00010101000000-000000000000
	github.com/ratemonitor/ratemonitor/internal/dynalitetest v0.0.0-00010101000000-000000000000
)

replace github.com/ratemonitor/ratemonitor => ../..

replace github.com/ratemonitor/ratemonitor/internal/dynalitetest => ../../internal/dynalitetest
