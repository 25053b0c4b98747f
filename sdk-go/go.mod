module github.com/weir-streaming/weir/sdk-go

go 1.23
