package weir

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// produceN writes n records to each of partitions 0..parts-1 of topic.
func produceN(t *testing.T, c *Client, topic string, parts int32, n int) {
	t.Helper()
	p, err := c.NewProducer(ProducerConfig{ManualPartitions: true})
	if err != nil {
		t.Fatal(err)
	}
	var records []Record
	for part := int32(0); part < parts; part++ {
		for i := 0; i < n; i++ {
			records = append(records, Record{Topic: topic, Partition: part, Value: []byte(fmt.Sprint(i))})
		}
	}
	if _, err := p.ProduceSync(testContext(t), records...); err != nil {
		t.Fatal(err)
	}
}

// A partition revoked and given back to the same member loses nothing: the
// member reads every offset of both partitions (duplicates allowed).
func TestARevokedPartitionGivenBackLosesNoRecord(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-regain", 2)
	produceN(t, c, topic, 2, 200)
	config := ConsumerConfig{GroupID: "go-regain-group", AutoOffsetReset: "earliest", MaxPollRecords: 50}
	a, err := c.NewConsumer(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	seen := map[TopicPartition]map[int64]bool{{topic, 0}: {}, {topic, 1}: {}}
	take := func(r *Record) { seen[TopicPartition{r.Topic, r.Partition}][r.Offset] = true }
	for i := 0; i < 60; i++ {
		r, err := a.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		take(r)
	}
	// A second member joins and takes a partition from A, then leaves
	// committing nothing: A gets the partition back.
	bConfig := config
	bConfig.DisableAutoCommit = true
	b, err := c.NewConsumer(bConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	for len(b.Assignment()) == 0 {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := b.PollBatch(short, 1)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for len(seen[TopicPartition{topic, 0}]) < 200 || len(seen[TopicPartition{topic, 1}]) < 200 {
		r, err := a.Poll(ctx)
		if err != nil {
			t.Fatalf("%v; seen %d and %d records", err, len(seen[TopicPartition{topic, 0}]), len(seen[TopicPartition{topic, 1}]))
		}
		take(r)
	}
}

// A paused partition's records already fetched are not handed out until
// Resume, and none are lost.
func TestPauseHoldsBackBufferedRecords(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-pause", 2)
	produceN(t, c, topic, 2, 100)
	cons, err := c.NewConsumer(ConsumerConfig{AutoOffsetReset: "earliest", MaxPollRecords: 500})
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Assign(ctx, TopicPartition{topic, 0}, TopicPartition{topic, 1}); err != nil {
		t.Fatal(err)
	}
	next := map[int32]int64{}
	check := func(r *Record) {
		if r.Offset != next[r.Partition] {
			t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition]++
	}
	// The first record's fetch brought the rest of its partition into the
	// consumer's buffer: pause that partition.
	first, err := cons.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check(first)
	pausedTP := TopicPartition{topic, first.Partition}
	if err := cons.Pause(pausedTP); err != nil {
		t.Fatal(err)
	}
	for {
		short, cancel := context.WithTimeout(ctx, time.Second)
		r, err := cons.Poll(short)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break // nothing more but the paused partition
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Partition == pausedTP.Partition {
			t.Fatalf("a record of paused partition %d (offset %d)", r.Partition, r.Offset)
		}
		check(r)
	}
	if err := cons.Resume(pausedTP); err != nil {
		t.Fatal(err)
	}
	for next[0] < 100 || next[1] < 100 {
		r, err := cons.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(r)
	}
}

// Every Produce that returned nil has its promise run by the time Close
// returns, and sends refused by the closing producer say ErrClosed.
func TestProduceRacingCloseRunsEveryPromise(t *testing.T) {
	c := newClient(t)
	topic := createTopic(t, c, "go-close-race", 1)
	for round := 0; round < 5; round++ {
		p, err := c.NewProducer(ProducerConfig{Acks: AcksLeader, Idempotent: Bool(false)})
		if err != nil {
			t.Fatal(err)
		}
		var accepted, promised atomic.Int64
		var wg sync.WaitGroup
		started := make(chan struct{})
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					if i == 100 && g == 0 {
						close(started)
					}
					err := p.Produce(context.Background(), Record{Topic: topic, Value: []byte("x")}, func(RecordMetadata, error) { promised.Add(1) })
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							t.Errorf("a send refused with %v, not ErrClosed", err)
						}
						return
					}
					accepted.Add(1)
				}
			}()
		}
		<-started
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if promised.Load() != accepted.Load() {
			t.Fatalf("round %d: %d sends accepted, %d promises ran", round, accepted.Load(), promised.Load())
		}
	}
}
