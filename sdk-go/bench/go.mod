module github.com/weir-streaming/weir/sdk-go/bench

go 1.26.0

require (
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kadm v1.20.0
	github.com/weir-streaming/weir/sdk-go v0.0.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
)

replace github.com/weir-streaming/weir/sdk-go => ../
