module github.com/ratemonitor/ratemonitor

go 1.26
