package weir

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// blackhole accepts connections and never answers, until release closes
// them: calls to it stay in flight as long as the test wants.
type blackhole struct {
	listener net.Listener
	accepted chan struct{} // one token per connection accepted
	mu       sync.Mutex
	conns    []net.Conn
}

func newBlackhole(t *testing.T) *blackhole {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{listener: l, accepted: make(chan struct{}, 1024)}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, conn)
			b.mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, conn) }()
			b.accepted <- struct{}{}
		}
	}()
	t.Cleanup(func() { _ = l.Close(); b.release() })
	return b
}

// release closes every connection: calls waiting on them fail at once.
func (b *blackhole) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, conn := range b.conns {
		_ = conn.Close()
	}
	b.conns = nil
}

// Client.Close with calls still running in the core: every waiting call
// returns ErrClosed, the outcomes that arrive after the queue is freed are
// dropped (no SIGPIPE on a Rust thread, which would kill the process), and
// later calls return ErrClosed.
func TestClientCloseWithCallsInFlight(t *testing.T) {
	ctx := testContext(t)
	setup := newClient(t)
	topic := createTopic(t, setup, "go-close-inflight", 1)
	for round := 0; round < 3; round++ {
		hole := newBlackhole(t)
		// One client on the real broker (a blocked Poll, a cancelled send,
		// admin calls), one on a broker that never answers (admin calls
		// that are sure to finish after Close).
		live, err := NewClient(Config{Brokers: []string{broker.address}})
		if err != nil {
			t.Fatal(err)
		}
		dead, err := NewClient(Config{Brokers: []string{hole.listener.Addr().String()}, RequestTimeout: deadline})
		if err != nil {
			t.Fatal(err)
		}
		cons, err := live.NewConsumer(ConsumerConfig{AutoOffsetReset: "latest"})
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Assign(ctx, TopicPartition{topic, 0}); err != nil {
			t.Fatal(err)
		}
		p, err := live.NewProducer(ProducerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		run := func(call func() error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- call()
			}()
		}
		run(func() error { _, err := cons.Poll(ctx); return err })
		for i := 0; i < 8; i++ {
			run(func() error { _, err := dead.Admin().ListTopics(ctx); return err })
			run(func() error { _, err := live.Admin().ListTopics(ctx); return err })
		}
		sendCtx, cancelSend := context.WithCancel(ctx)
		run(func() error {
			_, err := p.ProduceSync(sendCtx, Record{Topic: topic, Value: []byte("x")})
			return err
		})
		cancelSend()
		// The dead broker's calls are on the wire.
		select {
		case <-hole.accepted:
		case <-ctx.Done():
			t.Fatal("no connection to the silent broker")
		}
		if err := dead.Close(); err != nil {
			t.Fatal(err)
		}
		if err := live.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, context.Canceled) {
				t.Fatalf("a call in flight at Close: %v", err)
			}
		}
		// The silent broker's calls now fail in the core, after their queue
		// was freed: their outcomes go nowhere.
		hole.release()
		if _, err := dead.Admin().ListTopics(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("admin after Close: %v", err)
		}
		if _, err := live.Admin().ListTopics(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("admin after Close: %v", err)
		}
		if _, err := cons.Poll(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("poll after Close: %v", err)
		}
		if _, err := p.ProduceSync(ctx, Record{Topic: topic}); !errors.Is(err, ErrClosed) {
			t.Fatalf("send after Close: %v", err)
		}
		if _, err := live.NewConsumer(ConsumerConfig{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("a consumer of a closed client: %v", err)
		}
		// The process goes on: a fresh client works.
		if _, err := setup.Admin().ListTopics(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Producers and consumers closed on their own leave their client's list, and
// a closed consumer keeps no buffered records.
func TestClosedProducersAndConsumersAreForgotten(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-forget", 1)
	produceN(t, c, topic, 1, 50) // leaves its producer open
	c.mu.Lock()
	before := len(c.owned)
	c.mu.Unlock()
	for i := 0; i < 20; i++ {
		p, err := c.NewProducer(ProducerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		cons, err := c.NewConsumer(ConsumerConfig{AutoOffsetReset: "earliest"})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := cons.Assign(ctx, TopicPartition{topic, 0}); err != nil {
				t.Fatal(err)
			}
			if _, err := cons.Poll(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if err := cons.Close(); err != nil {
			t.Fatal(err)
		}
		cons.mu.Lock()
		left := len(cons.buffered)
		cons.mu.Unlock()
		if left != 0 {
			t.Fatalf("a closed consumer holds %d records", left)
		}
	}
	c.mu.Lock()
	owned := len(c.owned)
	c.mu.Unlock()
	if owned != before {
		t.Fatalf("the client holds %d producers and consumers, %d of them closed", owned, owned-before)
	}
}

// Calls racing Consumer.Close fail with ErrClosed, never with the core's
// refusal of a closed consumer.
func TestCallsRacingConsumerCloseReturnErrClosed(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-close-race-consumer", 2)
	tp := TopicPartition{topic, 0}
	for round := 0; round < 20; round++ {
		cons, err := c.NewConsumer(ConsumerConfig{GroupID: "go-close-race-consumer", AutoOffsetReset: "earliest"})
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Assign(ctx, tp); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		calls := []func() error{
			func() error { return cons.Assign(ctx, tp) },
			func() error { return cons.Seek(tp, 0) },
			func() error { return cons.Pause(tp) },
			func() error { return cons.Resume(tp) },
			func() error { return cons.CommitOffsets(ctx, TopicPartitionOffset{topic, 0, 0}) },
			func() error { _, _, err := cons.Committed(ctx, tp); return err },
		}
		for _, call := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					err := call()
					if errors.Is(err, ErrClosed) {
						return
					}
					var werr *Error
					if err != nil && !(errors.As(err, &werr) && werr.Retriable()) {
						t.Errorf("round %d: a call racing Close returned %v, not ErrClosed", round, err)
						return
					}
					select {
					case <-stop:
						return
					default:
					}
				}
			}()
		}
		if err := cons.Close(); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}

// A context that already ended starts nothing: no record is written, no
// promise runs.
func TestAnEndedContextSendsNothing(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-ended-ctx", 1)
	p, err := c.NewProducer(ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.ProduceSync(ended, Record{Topic: topic, Value: []byte("no")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("ProduceSync: %v", err)
	}
	promised := make(chan struct{}, 1)
	if err := p.Produce(ended, Record{Topic: topic, Value: []byte("no")}, func(RecordMetadata, error) { promised <- struct{}{} }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Produce: %v", err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-promised:
		t.Fatal("the promise of a send refused for its context ran")
	default:
	}
	mds, err := p.ProduceSync(ctx, Record{Topic: topic, Value: []byte("yes")})
	if err != nil {
		t.Fatal(err)
	}
	if mds[0].Offset != 0 {
		t.Fatalf("the first record sent with a live context is at offset %d: a send with an ended one was written", mds[0].Offset)
	}
	cons, err := c.NewConsumer(ConsumerConfig{GroupID: "go-ended-ctx", AutoOffsetReset: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := cons.Assign(ended, TopicPartition{topic, 0}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Assign: %v", err)
	}
	if err := cons.CommitOffsets(ended, TopicPartitionOffset{topic, 0, 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("CommitOffsets: %v", err)
	}
	if _, ok, err := cons.Committed(ctx, TopicPartition{topic, 0}); err != nil || ok {
		t.Fatalf("a commit with an ended context landed (ok %v, err %v)", ok, err)
	}
}

// Settings the SDK depends on cannot be turned off by user Settings.
func TestSettingsCannotOverrideWhatTheSDKNeeds(t *testing.T) {
	c := newClient(t)
	for _, settings := range []map[string]string{{"enable.auto.offset.store": "true"}} {
		_, err := c.NewConsumer(ConsumerConfig{Settings: settings})
		if !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("Settings %v: %v", settings, err)
		}
	}
	cons, err := c.NewConsumer(ConsumerConfig{Settings: map[string]string{"enable.auto.offset.store": "false"}})
	if err != nil {
		t.Fatalf("the SDK's own value: %v", err)
	}
	_ = cons.Close()
}
