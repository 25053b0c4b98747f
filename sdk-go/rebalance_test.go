package weir

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// bufferedOf counts the records cons holds, by partition (white box).
func bufferedOf(cons *Consumer) map[TopicPartition]int {
	cons.mu.Lock()
	defer cons.mu.Unlock()
	out := map[TopicPartition]int{}
	for _, r := range cons.buffered {
		out[TopicPartition{r.Topic, r.Partition}]++
	}
	return out
}

// drainFor polls cons until a poll finds nothing for quiet, handing each
// record to take.
func drainFor(t *testing.T, ctx context.Context, cons *Consumer, quiet time.Duration, take func(*Record)) {
	t.Helper()
	for {
		short, cancel := context.WithTimeout(ctx, quiet)
		batch, err := cons.PollBatch(short, 0)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range batch {
			take(r)
		}
	}
}

// A graceful hand-over delivers no record twice: once a partition was
// revoked, the records of it the member still buffers are not handed out
// (its new owner reads them from the commit made on revoke).
func TestRecordsOfARevokedPartitionAreNotHandedOut(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-revoked-buffer", 2)
	const n = 200
	produceN(t, c, topic, 2, n)
	group := "go-revoked-buffer-group"
	a, err := c.NewConsumer(ConsumerConfig{GroupID: group, AutoOffsetReset: "earliest", MaxPollRecords: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	seenA := map[TopicPartition]map[int64]bool{{topic, 0}: {}, {topic, 1}: {}}
	first, err := a.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seenA[TopicPartition{first.Topic, first.Partition}][first.Offset] = true
	// A holds records of both partitions it has not handed out.
	for {
		held := bufferedOf(a)
		if held[TopicPartition{topic, 0}] > 0 && held[TopicPartition{topic, 1}] > 0 {
			break
		}
		if err := a.fetch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b, err := c.NewConsumer(ConsumerConfig{GroupID: group, AutoOffsetReset: "earliest", DisableAutoCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	seenB := map[int64]bool{}
	var moved TopicPartition
	takeB := func(r *Record) {
		if (TopicPartition{r.Topic, r.Partition}) != moved {
			t.Fatalf("B read %s/%d, which it does not own", r.Topic, r.Partition)
		}
		if seenB[r.Offset] {
			t.Fatalf("B read offset %d twice", r.Offset)
		}
		seenB[r.Offset] = true
	}
	var early []*Record
	for len(b.Assignment()) == 0 {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		batch, err := b.PollBatch(short, 0)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		early = append(early, batch...)
	}
	// The coordinator gives B a partition only once A reported it gone.
	moved = b.Assignment()[0]
	for _, r := range early {
		takeB(r)
	}
	drainFor(t, ctx, a, 2*time.Second, func(r *Record) {
		tp := TopicPartition{r.Topic, r.Partition}
		if tp == moved {
			t.Fatalf("A handed out %s/%d offset %d after the partition was revoked", r.Topic, r.Partition, r.Offset)
		}
		seenA[tp][r.Offset] = true
	})
	for len(seenA[moved])+len(seenB) < n {
		r, err := b.Poll(ctx)
		if err != nil {
			t.Fatalf("%v: A read %d records of the moved partition, B %d", err, len(seenA[moved]), len(seenB))
		}
		takeB(r)
	}
	for offset := range seenB {
		if seenA[moved][offset] {
			t.Fatalf("offset %d of the moved partition was read by both members", offset)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// A partition paused before it is assigned starts paused: no record of it is
// handed out and none piles up in the consumer; Resume reads it from where
// it started.
func TestAPartitionPausedBeforeItIsAssignedStaysPaused(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-pause-early", 2)
	produceN(t, c, topic, 2, 100)
	cons, err := c.NewConsumer(ConsumerConfig{AutoOffsetReset: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	p0, p1 := TopicPartition{topic, 0}, TopicPartition{topic, 1}
	if err := cons.Pause(p0); err != nil {
		t.Fatal(err)
	}
	if err := cons.Assign(ctx, p0, p1); err != nil {
		t.Fatal(err)
	}
	next := map[int32]int64{}
	check := func(r *Record) {
		if r.Partition == p0.Partition && next[1] < 100 {
			t.Fatalf("a record of paused partition 0 (offset %d)", r.Offset)
		}
		if r.Offset != next[r.Partition] {
			t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition]++
	}
	for next[1] < 100 {
		r, err := cons.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(r)
	}
	// One more fetch round: the paused partition's records stay in the core.
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := cons.Poll(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a poll with only the paused partition left: %v", err)
	}
	cancel()
	if held := bufferedOf(cons)[p0]; held != 0 {
		t.Fatalf("the consumer buffers %d records of the paused partition", held)
	}
	if err := cons.Resume(p0); err != nil {
		t.Fatal(err)
	}
	for next[0] < 100 {
		r, err := cons.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(r)
	}
}

// A partition that leaves the assignment forgets its pause (as in Kafka): a
// paused partition revoked and given back is read again, while one that
// stayed is still paused.
func TestAPauseEndsWhenThePartitionLeaves(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-pause-revoke", 2)
	group := "go-pause-revoke-group"
	a, err := c.NewConsumer(ConsumerConfig{GroupID: group, AutoOffsetReset: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	for len(a.Assignment()) < 2 {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := a.PollBatch(short, 0)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	}
	if err := a.Pause(a.Assignment()...); err != nil {
		t.Fatal(err)
	}
	produceN(t, c, topic, 2, 50)
	b, err := c.NewConsumer(ConsumerConfig{GroupID: group, AutoOffsetReset: "earliest", DisableAutoCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	for len(b.Assignment()) == 0 {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := b.PollBatch(short, 0)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	}
	moved := b.Assignment()[0]
	if err := b.Close(); err != nil { // A gets the partition back
		t.Fatal(err)
	}
	within, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r, err := a.Poll(within)
	if err != nil {
		t.Fatalf("the partition given back is still paused: %v", err)
	}
	if (TopicPartition{r.Topic, r.Partition}) != moved {
		t.Fatalf("a record of %s/%d, which stayed paused", r.Topic, r.Partition)
	}
}

// Records of a fetch still in flight when Assign moved to other partitions
// (its Poll was cancelled) are dropped when it lands, not handed out.
func TestAnInFlightFetchOfAPartitionAssignedAwayIsDropped(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-assign-stale", 2)
	produceN(t, c, topic, 2, 10)
	cons, err := c.NewConsumer(ConsumerConfig{AutoOffsetReset: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Assign(ctx, TopicPartition{topic, 0}); err != nil {
		t.Fatal(err)
	}
	// The outcome of a fetch of partition 0 that a cancelled Poll left
	// behind (as the core would deliver it).
	var stale []Record
	for i := 0; i < 5; i++ {
		stale = append(stale, Record{Topic: topic, Partition: 0, Offset: int64(i), Value: []byte(fmt.Sprint(i))})
	}
	outcome := consumedCompletion(stale)
	inflight := make(chan completion, 1)
	inflight <- outcome
	cons.mu.Lock()
	cons.inflight = inflight
	cons.inflightGen = maps.Clone(cons.seekGen)
	cons.inflightEpoch = cons.assignEpoch
	cons.mu.Unlock()
	if err := cons.Assign(ctx, TopicPartition{topic, 1}); err != nil {
		t.Fatal(err)
	}
	for _, r := range pollN(t, ctx, cons, 10) {
		if r.Partition != 1 {
			t.Fatalf("a record of partition %d (offset %d), assigned away before its fetch landed", r.Partition, r.Offset)
		}
	}
}

// Subscribe after Assign leaves the assigned partitions: their buffered
// records are not handed out.
func TestSubscribeAfterAssignDropsTheAssignedRecords(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	assigned := createTopic(t, c, "go-assign-then-subscribe-a", 1)
	subscribed := createTopic(t, c, "go-assign-then-subscribe-b", 1)
	produceN(t, c, assigned, 1, 100)
	produceN(t, c, subscribed, 1, 10)
	cons, err := c.NewConsumer(ConsumerConfig{GroupID: "go-assign-then-subscribe", AutoOffsetReset: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Assign(ctx, TopicPartition{assigned, 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := cons.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	for bufferedOf(cons)[TopicPartition{assigned, 0}] == 0 {
		if err := cons.fetch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := cons.Subscribe(ctx, subscribed); err != nil {
		t.Fatal(err)
	}
	for _, r := range pollN(t, ctx, cons, 10) {
		if r.Topic != subscribed {
			t.Fatalf("a record of %s/%d offset %d, read through Assign before Subscribe", r.Topic, r.Partition, r.Offset)
		}
	}
}

// Seeks racing a polling goroutine: the last one wins (a fetch that ends
// after it never re-makes an older one).
func TestTheLastSeekWins(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-seek-race", 1)
	produceN(t, c, topic, 1, 200)
	cons, err := c.NewConsumer(ConsumerConfig{AutoOffsetReset: "earliest", MaxPollRecords: 20})
	if err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{topic, 0}
	if err := cons.Assign(ctx, tp); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 5; round++ {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // polls, often cancelling mid-fetch
			defer wg.Done()
			for {
				pollCtx, cancel := context.WithCancel(ctx)
				// Cancelled at once, soon or not at all: fetches are left in
				// flight at every stage.
				switch rand.IntN(3) {
				case 0:
					cancel()
				case 1:
					time.AfterFunc(time.Duration(rand.Int64N(int64(2*time.Millisecond))), cancel)
				}
				go func() {
					select {
					case <-stop:
						cancel()
					case <-pollCtx.Done():
					}
				}()
				_, err := cons.PollBatch(pollCtx, 0)
				cancel()
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Error(err)
					return
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
		for i := 0; i < 200; i++ {
			if err := cons.Seek(tp, rand.Int64N(200)); err != nil {
				t.Fatal(err)
			}
		}
		end := int64(200 + round) // a marker per round so far
		if err := cons.Seek(tp, end); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		marker := fmt.Sprint("marker-", round)
		p, err := c.NewProducer(ProducerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.ProduceSync(ctx, Record{Topic: topic, Value: []byte(marker)}); err != nil {
			t.Fatal(err)
		}
		_ = p.Close()
		r, err := cons.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Value) != marker {
			t.Fatalf("round %d: after the last seek (to %d) the next record is offset %d (%q)", round, end, r.Offset, r.Value)
		}
	}
}
