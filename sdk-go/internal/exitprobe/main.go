// Command exitprobe is a short-lived program that leaves a client open with
// work in flight and returns from main: the test runs it many times and
// expects each to exit 0, at once. Usage: exitprobe BROKER TOPIC
package main

import (
	"context"
	"fmt"
	"os"

	weir "github.com/weir-streaming/weir/sdk-go"
)

func main() {
	c, err := weir.NewClient(weir.Config{Brokers: []string{os.Args[1]}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	p, err := c.NewProducer(weir.ProducerConfig{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cons, err := c.NewConsumer(weir.ConsumerConfig{AutoOffsetReset: "latest"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := context.Background()
	_ = cons.Assign(ctx, weir.TopicPartition{Topic: os.Args[2], Partition: 0})
	// In flight when main returns: a poll waiting for records, sends not yet
	// acknowledged, an admin call.
	go func() { _, _ = cons.Poll(ctx) }()
	for i := 0; i < 100; i++ {
		_ = p.Produce(ctx, weir.Record{Topic: os.Args[2], Value: []byte("in flight")}, nil)
	}
	go func() { _, _ = c.Admin().ListTopics(ctx) }()
	fmt.Println("ok")
}
