// Command quickstart produces three records to a topic and reads them back as
// a consumer group member. Start a broker first (`weir serve`), then:
//
//	go run ./examples/quickstart [-brokers 127.0.0.1:9292] [-topic quickstart]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"time"

	weir "github.com/weir-streaming/weir/sdk-go"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9292", "a broker's host:port")
	topic := flag.String("topic", "quickstart", "the topic (created if missing)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := weir.NewClient(weir.Config{Brokers: []string{*brokers}, ClientID: "quickstart"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.Admin().CreateTopics(ctx, weir.NewTopic{Name: *topic, Partitions: 3})
	if err != nil && !errors.Is(err, weir.ErrTopicAlreadyExists) {
		log.Fatal(err)
	}

	p, err := c.NewProducer(weir.ProducerConfig{Linger: 5 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	var records []weir.Record
	for i := 0; i < 3; i++ {
		records = append(records, weir.Record{
			Topic:   *topic,
			Key:     []byte(fmt.Sprintf("user-%d", i)),
			Value:   []byte(fmt.Sprintf("hello %d", i)),
			Headers: []weir.Header{{Key: "source", Value: []byte("quickstart")}},
		})
	}
	landed, err := p.ProduceSync(ctx, records...)
	if err != nil {
		log.Fatal(err)
	}
	for _, md := range landed {
		fmt.Printf("sent to %s/%d at offset %d\n", md.Topic, md.Partition, md.Offset)
	}

	cons, err := c.NewConsumer(weir.ConsumerConfig{GroupID: "quickstart", AutoOffsetReset: "earliest"})
	if err != nil {
		log.Fatal(err)
	}
	if err := cons.Subscribe(ctx, *topic); err != nil {
		log.Fatal(err)
	}
	read := 0
	for r, err := range cons.Records(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("read %s/%d@%d key=%s value=%s\n", r.Topic, r.Partition, r.Offset, r.Key, r.Value)
		if read++; read == len(records) {
			break
		}
	}
	if err := cons.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}
