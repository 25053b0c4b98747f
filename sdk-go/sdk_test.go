package weir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
)

func TestRoundTripWithKeysHeadersAndNullKeys(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-round-trip", 3)
	p, err := c.NewProducer(ProducerConfig{Linger: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sent := []Record{
		{Topic: topic, Key: []byte("k1"), Value: []byte("v1"), Headers: []Header{{"h", []byte("x")}, {"h", nil}, {"e", []byte{}}}},
		{Topic: topic, Key: nil, Value: []byte("no key")},
		{Topic: topic, Key: []byte("k3"), Value: nil},
		{Topic: topic, Key: []byte("k4"), Value: bytes.Repeat([]byte{0xff}, 100_000), Timestamp: time.UnixMilli(1_700_000_000_123)},
	}
	mds, err := p.ProduceSync(ctx, sent...)
	if err != nil {
		t.Fatal(err)
	}
	if len(mds) != len(sent) {
		t.Fatalf("%d metadata for %d records", len(mds), len(sent))
	}
	for i, md := range mds {
		if md.Topic != topic || md.Offset < 0 {
			t.Fatalf("record %d landed at %+v", i, md)
		}
		if key := sent[i].Key; key != nil && md.Partition != PartitionForKey(key, 3) {
			t.Fatalf("record %d: partition %d, murmur2 says %d", i, md.Partition, PartitionForKey(key, 3))
		}
	}
	if !mds[3].Timestamp.Equal(time.UnixMilli(1_700_000_000_123)) {
		t.Fatalf("timestamp %v", mds[3].Timestamp)
	}

	cons, err := c.NewConsumer(ConsumerConfig{AutoOffsetReset: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Assign(ctx, TopicPartition{topic, 0}, TopicPartition{topic, 1}, TopicPartition{topic, 2}); err != nil {
		t.Fatal(err)
	}
	got := pollN(t, ctx, cons, len(sent))
	byOffset := map[[2]int64]*Record{}
	for _, r := range got {
		byOffset[[2]int64{int64(r.Partition), r.Offset}] = r
	}
	for i, want := range sent {
		r := byOffset[[2]int64{int64(mds[i].Partition), mds[i].Offset}]
		if r == nil {
			t.Fatalf("record %d not read back", i)
		}
		if (r.Key == nil) != (want.Key == nil) || !bytes.Equal(r.Key, want.Key) {
			t.Fatalf("record %d key %q, want %q", i, r.Key, want.Key)
		}
		if (r.Value == nil) != (want.Value == nil) || !bytes.Equal(r.Value, want.Value) {
			t.Fatalf("record %d value differs (nil %v, want nil %v)", i, r.Value == nil, want.Value == nil)
		}
		if len(r.Headers) != len(want.Headers) {
			t.Fatalf("record %d headers %v, want %v", i, r.Headers, want.Headers)
		}
		for h := range want.Headers {
			g, w := r.Headers[h], want.Headers[h]
			if g.Key != w.Key || (g.Value == nil) != (w.Value == nil) || !bytes.Equal(g.Value, w.Value) {
				t.Fatalf("record %d header %d: %+v, want %+v", i, h, g, w)
			}
		}
	}
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cons.Poll(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("poll after close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ProduceSync(ctx, sent[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("produce after close: %v", err)
	}
}

func TestAsyncProduceKeepsOrderAndFlushWaitsForPromises(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-async", 1)
	p, err := c.NewProducer(ProducerConfig{Acks: AcksLeader, Idempotent: Bool(false), BufferBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	var mu sync.Mutex
	var offsets []int64
	for i := 0; i < n; i++ {
		record := Record{Topic: topic, Value: []byte(fmt.Sprintf("%0100d", i))}
		err := p.Produce(ctx, record, func(md RecordMetadata, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("record: %v", err)
				return
			}
			offsets = append(offsets, md.Offset)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(offsets) != n {
		t.Fatalf("%d promises ran by the end of Flush, want %d", len(offsets), n)
	}
	for i, offset := range offsets {
		if offset != int64(i) {
			t.Fatalf("promise %d saw offset %d: promises out of send order", i, offset)
		}
	}
}

func TestCommitThenResumeFromTheCommittedOffset(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-commit", 1)
	p, err := c.NewProducer(ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var records []Record
	for i := 0; i < 10; i++ {
		records = append(records, Record{Topic: topic, Value: []byte{byte(i)}})
	}
	if _, err := p.ProduceSync(ctx, records...); err != nil {
		t.Fatal(err)
	}
	first, err := c.NewConsumer(ConsumerConfig{GroupID: "go-commit-group", AutoOffsetReset: "earliest", DisableAutoCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		r, err := first.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset != int64(i) {
			t.Fatalf("poll %d: offset %d", i, r.Offset)
		}
	}
	// Four handed out (more may sit in the consumer's buffer): the commit
	// covers exactly those four.
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if offset, ok, err := first.Committed(ctx, TopicPartition{topic, 0}); err != nil || !ok || offset != 4 {
		t.Fatalf("committed %d %v %v, want 4", offset, ok, err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := c.NewConsumer(ConsumerConfig{GroupID: "go-commit-group", AutoOffsetReset: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := second.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	r, err := second.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Offset != 4 {
		t.Fatalf("resumed at %d, want 4", r.Offset)
	}
	// Seek back and read from the start through the iterator.
	if err := second.SeekToBeginning(TopicPartition{topic, 0}); err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	for r, err := range second.Records(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset != want {
			t.Fatalf("after the seek: offset %d, want %d", r.Offset, want)
		}
		if want++; want == 10 {
			break
		}
	}
}

func TestCancellingABlockedPollReturnsPromptly(t *testing.T) {
	c := newClient(t)
	topic := createTopic(t, c, "go-cancel", 1)
	cons, err := c.NewConsumer(ConsumerConfig{AutoOffsetReset: "latest"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Assign(testContext(t), TopicPartition{topic, 0}); err != nil {
		t.Fatal(err)
	}
	// Warm: one poll that times out, so the next waits on an idle partition.
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = cons.Poll(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an empty poll: %v", err)
	}
	// The bound is < 200 ms; a loaded machine can deschedule any one round,
	// so the median of 7 must meet it and every round a generous 5 s.
	var took []time.Duration
	for round := 0; round < 7; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		returned := make(chan error, 1)
		go func() {
			_, err := cons.Poll(ctx)
			returned <- err
		}()
		time.Sleep(150 * time.Millisecond) // let it block (any time works: cancel ends the wait either way)
		cancelled := time.Now()
		cancel()
		err := <-returned
		took = append(took, time.Since(cancelled))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	t.Logf("poll returned after cancel in %v", took)
	sorted := append([]time.Duration(nil), took...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	if sorted[len(sorted)/2] >= 200*time.Millisecond || sorted[len(sorted)-1] > 5*time.Second {
		t.Fatalf("poll returned %v after cancel (median must be < 200 ms)", took)
	}
	// Nothing is lost across cancelled polls.
	p, _ := c.NewProducer(ProducerConfig{})
	if _, err := p.ProduceSync(testContext(t), Record{Topic: topic, Value: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	r, err := cons.Poll(testContext(t))
	if err != nil || string(r.Value) != "after" {
		t.Fatalf("after cancelled polls: %v %v", r, err)
	}
}

func TestTypedErrors(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	_, err := c.Admin().DescribeTopic(ctx, "go-no-such-topic")
	var werr *Error
	if !errors.Is(err, ErrUnknownTopic) || !errors.As(err, &werr) || werr.Code != CodeUnknownTopicOrPartition || !werr.Retriable() {
		t.Fatalf("unknown topic: %v", err)
	}
	topic := "go-small"
	small := NewTopic{Name: topic, Partitions: 1, Configs: map[string]string{"max.message.bytes": "1024"}}
	if err := c.Admin().CreateTopics(ctx, small); err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.ProduceSync(ctx, Record{Topic: topic, Value: make([]byte, 4096)})
	if !errors.Is(err, ErrMessageTooLarge) || !errors.As(err, &werr) || werr.Retriable() {
		t.Fatalf("oversize record: %v", err)
	}
	// The producer keeps working after a refusal.
	if mds, err := p.ProduceSync(ctx, Record{Topic: topic, Value: []byte("fits")}); err != nil || mds[0].Offset != 0 {
		t.Fatalf("after a refusal: %v %v", mds, err)
	}
	if err := c.Admin().CreateTopics(ctx, NewTopic{Name: topic, Partitions: 1}); !errors.Is(err, ErrTopicAlreadyExists) {
		t.Fatalf("create twice: %v", err)
	}
	if _, err := c.NewProducer(ProducerConfig{Settings: map[string]string{"no.such.setting": "1"}}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("unknown setting: %v", err)
	}
	if _, err := NewClient(Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("no brokers: %v", err)
	}

	// A broker that is down: a network error, retriable, within the delivery timeout.
	address, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	down, err := NewClient(Config{Brokers: []string{address}, RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	_, err = down.Admin().ListTopics(ctx)
	if !errors.As(err, &werr) || !werr.Retriable() {
		t.Fatalf("broker down: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the broker-down error took the whole test deadline")
	}
}
