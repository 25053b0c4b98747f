package weir

/*
#include "weir.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ConsumerConfig configures a consumer; zero values take the core's defaults.
type ConsumerConfig struct {
	// GroupID is the consumer group; Subscribe needs one (Assign does not).
	GroupID string
	// GroupInstanceID makes the member static: a restart within the session
	// timeout keeps its partitions.
	GroupInstanceID string
	// AutoOffsetReset is where a partition without a committed offset starts:
	// "earliest", "latest" (the default) or "none" (an error).
	AutoOffsetReset string
	// DisableAutoCommit stops committing in the background; call Commit.
	DisableAutoCommit bool
	// AutoCommitInterval is how often the background commit runs.
	AutoCommitInterval time.Duration
	SessionTimeout     time.Duration
	// MaxPollRecords bounds the records one fetch from the core returns
	// (default 500); Poll hands them out one at a time.
	MaxPollRecords int
	// OnAssigned, OnRevoked and OnLost are called with assignment changes of
	// a group member, on the goroutine that polls, before the Poll that
	// noticed them returns. Buffered records of revoked or lost partitions
	// are dropped first.
	OnAssigned func([]TopicPartition)
	OnRevoked  func([]TopicPartition)
	OnLost     func([]TopicPartition)
	// Settings are any other consumer settings by their Kafka names.
	Settings map[string]string
}

func (cfg ConsumerConfig) settings() map[string]string {
	// What commits take is what Poll has handed out, never records still
	// buffered here: offsets are stored as records leave.
	m := map[string]string{"enable.auto.offset.store": "false"}
	if cfg.GroupID != "" {
		m["group.id"] = cfg.GroupID
	}
	if cfg.GroupInstanceID != "" {
		m["group.instance.id"] = cfg.GroupInstanceID
	}
	if cfg.AutoOffsetReset != "" {
		m["auto.offset.reset"] = cfg.AutoOffsetReset
	}
	if cfg.DisableAutoCommit {
		m["enable.auto.commit"] = "false"
	}
	if cfg.AutoCommitInterval > 0 {
		m["auto.commit.interval.ms"] = millis(cfg.AutoCommitInterval)
	}
	if cfg.SessionTimeout > 0 {
		m["session.timeout.ms"] = millis(cfg.SessionTimeout)
	}
	if cfg.MaxPollRecords > 0 {
		m["max.poll.records"] = strconv.Itoa(cfg.MaxPollRecords)
	}
	return m
}

// pollWait is how long one fetch from the core waits before the consumer
// looks at rebalance events and asks again.
const pollWait = time.Second

// Consumer reads records: as a member of a group (Subscribe) or from
// assigned partitions (Assign). Poll, PollBatch and Records may be called
// from one goroutine at a time (others wait their turn); the other methods
// from any goroutine.
type Consumer struct {
	client  *Client
	config  ConsumerConfig
	maxPoll int

	handleMu sync.RWMutex // read: a call on the handle; write: freeing it
	handle   *C.WeirConsumer

	turn chan struct{} // held by the goroutine polling

	mu       sync.Mutex // guards the fields below
	buffered []*Record
	// stored is the next offset per partition of what Poll handed out, not
	// yet passed to the core.
	stored map[TopicPartition]int64
	// inflight is the outcome of a fetch still running in the core (one whose
	// Poll was cancelled); its records are buffered when it arrives.
	inflight chan completion
	// seeks made while a fetch ran: re-issued once it ends, and its records
	// of those partitions dropped.
	seeks map[TopicPartition]seekTarget

	closing   atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

type seekTarget struct {
	whence C.WeirSeek
	offset int64
}

// NewConsumer makes a consumer; Subscribe or Assign says what it reads.
func (c *Client) NewConsumer(config ConsumerConfig) (*Consumer, error) {
	settings := c.settings(config.Settings, config.settings())
	ptr, n := cBytes(settings)
	var handle *C.WeirConsumer
	if err := takeError(C.weir_consumer_new(ptr, n, &handle)); err != nil {
		return nil, err
	}
	maxPoll := config.MaxPollRecords
	if maxPoll <= 0 {
		maxPoll = 500
	}
	cons := &Consumer{
		client:  c,
		config:  config,
		maxPoll: maxPoll,
		handle:  handle,
		turn:    make(chan struct{}, 1),
		stored:  map[TopicPartition]int64{},
		seeks:   map[TopicPartition]seekTarget{},
	}
	if err := c.own(cons); err != nil {
		C.weir_consumer_free(handle)
		return nil, err
	}
	return cons, nil
}

func (cons *Consumer) with(use func(*C.WeirConsumer) error) error {
	cons.handleMu.RLock()
	defer cons.handleMu.RUnlock()
	if cons.handle == nil {
		return ErrClosed
	}
	return use(cons.handle)
}

// call starts a core call on the consumer and waits for it (or ctx).
func (cons *Consumer) call(ctx context.Context, begin func(*C.WeirConsumer, *C.WeirQueue, C.uint64_t) *C.WeirError) (completion, error) {
	var done completion
	err := cons.with(func(handle *C.WeirConsumer) error {
		var err error
		done, err = cons.client.engine.call(ctx, func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
			return begin(handle, queue, token)
		})
		return err
	})
	return done, err
}

// Subscribe joins the group (ConsumerConfig.GroupID) as a member reading
// topics; the group spreads their partitions over its members.
func (cons *Consumer) Subscribe(ctx context.Context, topics ...string) error {
	if topics == nil {
		topics = []string{}
	}
	list, _ := json.Marshal(topics)
	_, err := cons.call(ctx, func(handle *C.WeirConsumer, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		ptr, n := cBytes(list)
		return C.weir_consumer_subscribe(handle, queue, token, ptr, n, nil, 0)
	})
	return err
}

// SubscribePattern joins the group as a member reading every topic whose
// whole name matches the regular expression pattern (topics created later
// included).
func (cons *Consumer) SubscribePattern(ctx context.Context, pattern string) error {
	if pattern == "" {
		return &Error{Code: CodeInvalidRequest, Message: "an empty topic pattern"}
	}
	_, err := cons.call(ctx, func(handle *C.WeirConsumer, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		ptr, n := cString(pattern)
		return C.weir_consumer_subscribe(handle, queue, token, nil, 0, ptr, n)
	})
	return err
}

// Assign reads exactly these partitions, outside any group, from their
// committed offsets (with a GroupID) or AutoOffsetReset.
func (cons *Consumer) Assign(ctx context.Context, partitions ...TopicPartition) error {
	list := make([][2]any, len(partitions))
	for i, tp := range partitions {
		list[i] = [2]any{tp.Topic, tp.Partition}
	}
	body, _ := json.Marshal(list)
	_, err := cons.call(ctx, func(handle *C.WeirConsumer, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		ptr, n := cBytes(body)
		return C.weir_consumer_assign(handle, queue, token, ptr, n)
	})
	return err
}

func (cons *Consumer) takeTurn(ctx context.Context) error {
	select {
	case cons.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (cons *Consumer) endTurn() { <-cons.turn }

// Poll returns the next record, waiting for one until ctx ends. Its offset
// counts as handled: the next commit (Commit or the background one) covers
// it. A cancelled ctx returns ctx.Err() promptly and loses nothing: records
// that arrive afterwards are returned by the next Poll.
func (cons *Consumer) Poll(ctx context.Context) (*Record, error) {
	records, err := cons.PollBatch(ctx, 1)
	if err != nil {
		return nil, err
	}
	return records[0], nil
}

// PollBatch returns between 1 and max records (max <= 0: MaxPollRecords) as
// soon as any are there, waiting until ctx ends. Their offsets count as
// handled, as with Poll.
func (cons *Consumer) PollBatch(ctx context.Context, max int) ([]*Record, error) {
	if max <= 0 {
		max = cons.maxPoll
	}
	if err := cons.takeTurn(ctx); err != nil {
		return nil, err
	}
	defer cons.endTurn()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if cons.closing.Load() {
			return nil, ErrClosed
		}
		if out := cons.handOut(max); len(out) > 0 {
			return out, nil
		}
		if err := cons.fetch(ctx); err != nil {
			return nil, err
		}
	}
}

// Records iterates over records as Poll returns them until ctx ends or the
// consumer closes (the last pair then carries that error). Other errors are
// yielded and iteration goes on; break out of the loop to stop.
func (cons *Consumer) Records(ctx context.Context) iter.Seq2[*Record, error] {
	return func(yield func(*Record, error) bool) {
		for {
			record, err := cons.Poll(ctx)
			if err != nil {
				terminal := ctx.Err() != nil || errors.Is(err, ErrClosed)
				if !yield(nil, err) || terminal {
					return
				}
				continue
			}
			if !yield(record, nil) {
				return
			}
		}
	}
}

// handOut takes up to max buffered records and notes their offsets as
// handled.
func (cons *Consumer) handOut(max int) []*Record {
	cons.mu.Lock()
	defer cons.mu.Unlock()
	n := min(max, len(cons.buffered))
	if n == 0 {
		return nil
	}
	out := make([]*Record, n)
	copy(out, cons.buffered[:n])
	clear(cons.buffered[:n])
	cons.buffered = cons.buffered[n:]
	for _, r := range out {
		cons.stored[TopicPartition{r.Topic, r.Partition}] = r.Offset + 1
	}
	return out
}

// flushStores passes the offsets handed out so far to the core.
func (cons *Consumer) flushStores(handle *C.WeirConsumer) error {
	cons.mu.Lock()
	if len(cons.stored) == 0 {
		cons.mu.Unlock()
		return nil
	}
	entries := make([][3]any, 0, len(cons.stored))
	for tp, offset := range cons.stored {
		entries = append(entries, [3]any{tp.Topic, tp.Partition, offset})
	}
	clear(cons.stored)
	cons.mu.Unlock()
	body, _ := json.Marshal(entries)
	ptr, n := cBytes(body)
	return takeError(C.weir_consumer_store_offsets(handle, ptr, n))
}

// fetch runs one fetch from the core (or waits for the one in flight) and
// buffers what it returns; rebalance events it brought are handled first.
func (cons *Consumer) fetch(ctx context.Context) error {
	cons.mu.Lock()
	inflight := cons.inflight
	cons.mu.Unlock()
	if inflight == nil {
		outcome := make(chan completion, 1)
		err := cons.with(func(handle *C.WeirConsumer) error {
			if err := cons.flushStores(handle); err != nil {
				return err
			}
			_, err := cons.client.engine.start(func(c completion) { outcome <- c }, func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
				return C.weir_consumer_poll(handle, queue, token, C.uint64_t(pollWait.Milliseconds()), C.uint32_t(cons.maxPoll))
			})
			return err
		})
		if err != nil {
			return err
		}
		inflight = outcome
		cons.mu.Lock()
		cons.inflight = outcome
		cons.mu.Unlock()
	}
	select {
	case done := <-inflight:
		return cons.fetched(done)
	case <-ctx.Done():
		// The core's wait ends at once; its outcome (records included)
		// is taken by the next fetch.
		_ = cons.with(func(handle *C.WeirConsumer) error {
			C.weir_consumer_wakeup(handle)
			return nil
		})
		return ctx.Err()
	case <-cons.client.engine.done:
		return ErrClosed
	}
}

func (cons *Consumer) fetched(done completion) error {
	cons.mu.Lock()
	cons.inflight = nil
	seeks := cons.seeks
	cons.seeks = map[TopicPartition]seekTarget{}
	cons.mu.Unlock()
	err := done.err()
	var records []*Record
	if err == nil {
		records, err = decodeRecords(done.data)
	}
	// Seeks made while the fetch ran win over it: their partitions' records
	// from it are dropped and the seeks made again (the fetch moved the
	// position past them).
	if len(seeks) > 0 {
		kept := records[:0]
		for _, r := range records {
			if _, sought := seeks[TopicPartition{r.Topic, r.Partition}]; !sought {
				kept = append(kept, r)
			}
		}
		records = kept
		for tp, target := range seeks {
			_ = cons.seek(tp, target) // a partition no longer owned needs none
		}
	}
	cons.mu.Lock()
	cons.buffered = append(cons.buffered, records...)
	cons.mu.Unlock()
	cons.rebalanced()
	return err
}

type rebalanceEvent struct {
	Kind       string           `json:"kind"`
	Partitions []TopicPartition `json:"partitions"`
}

// rebalanced handles the assignment changes the core noted: buffered records
// of partitions that left are dropped, then the callbacks run.
func (cons *Consumer) rebalanced() {
	var events []rebalanceEvent
	_ = cons.with(func(handle *C.WeirConsumer) error {
		return json.Unmarshal([]byte(takeString(C.weir_consumer_rebalance_events(handle))), &events)
	})
	for _, event := range events {
		partitions := event.Partitions
		var callback func([]TopicPartition)
		switch event.Kind {
		case "assigned":
			callback = cons.config.OnAssigned
		case "revoked", "lost":
			cons.dropPartitions(partitions)
			callback = cons.config.OnRevoked
			if event.Kind == "lost" {
				callback = cons.config.OnLost
			}
		}
		if callback != nil {
			callback(partitions)
		}
	}
}

func (cons *Consumer) dropPartitions(partitions []TopicPartition) {
	gone := make(map[TopicPartition]bool, len(partitions))
	cons.mu.Lock()
	defer cons.mu.Unlock()
	for _, tp := range partitions {
		gone[tp] = true
		delete(cons.stored, tp)
	}
	kept := cons.buffered[:0]
	for _, r := range cons.buffered {
		if !gone[TopicPartition{r.Topic, r.Partition}] {
			kept = append(kept, r)
		}
	}
	clear(cons.buffered[len(kept):])
	cons.buffered = kept
}

// Commit commits, for every owned partition, the offset after the last
// record Poll handed out.
func (cons *Consumer) Commit(ctx context.Context) error {
	if err := cons.with(cons.flushStores); err != nil {
		return err
	}
	_, err := cons.call(ctx, func(handle *C.WeirConsumer, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		return C.weir_consumer_commit(handle, queue, token, nil, 0)
	})
	return err
}

// CommitOffsets commits exactly these offsets (each the next one to read).
func (cons *Consumer) CommitOffsets(ctx context.Context, offsets ...TopicPartitionOffset) error {
	if len(offsets) == 0 {
		return nil
	}
	entries := make([][3]any, len(offsets))
	for i, o := range offsets {
		if o.Offset < 0 {
			return &Error{Code: CodeInvalidRequest, Message: "a commit offset is negative"}
		}
		entries[i] = [3]any{o.Topic, o.Partition, o.Offset}
	}
	body, _ := json.Marshal(entries)
	_, err := cons.call(ctx, func(handle *C.WeirConsumer, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		ptr, n := cBytes(body)
		return C.weir_consumer_commit(handle, queue, token, ptr, n)
	})
	return err
}

// Committed is the group's committed offset of a partition; ok is false
// when it has none.
func (cons *Consumer) Committed(ctx context.Context, tp TopicPartition) (offset int64, ok bool, err error) {
	done, err := cons.call(ctx, func(handle *C.WeirConsumer, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		ptr, n := cString(tp.Topic)
		return C.weir_consumer_committed(handle, queue, token, ptr, n, C.int32_t(tp.Partition))
	})
	if err != nil {
		return 0, false, err
	}
	if len(done.data) != 8 {
		return 0, false, nil
	}
	return int64(le.Uint64(done.data)), true, nil
}

// Seek moves an owned partition's position to offset; records of it still
// buffered are dropped.
func (cons *Consumer) Seek(tp TopicPartition, offset int64) error {
	if offset < 0 {
		return &Error{Code: CodeInvalidRequest, Message: "a seek offset is negative"}
	}
	return cons.seekFrom(tp, seekTarget{C.WEIR_SEEK_OFFSET, offset})
}

// SeekToBeginning moves an owned partition's position to its log start.
func (cons *Consumer) SeekToBeginning(tp TopicPartition) error {
	return cons.seekFrom(tp, seekTarget{C.WEIR_SEEK_EARLIEST, 0})
}

// SeekToEnd moves an owned partition's position to its log end.
func (cons *Consumer) SeekToEnd(tp TopicPartition) error {
	return cons.seekFrom(tp, seekTarget{C.WEIR_SEEK_LATEST, 0})
}

func (cons *Consumer) seekFrom(tp TopicPartition, target seekTarget) error {
	if err := cons.seek(tp, target); err != nil {
		return err
	}
	cons.dropPartitions([]TopicPartition{tp})
	cons.mu.Lock()
	if cons.inflight != nil {
		cons.seeks[tp] = target
	}
	cons.mu.Unlock()
	return nil
}

func (cons *Consumer) seek(tp TopicPartition, target seekTarget) error {
	return cons.with(func(handle *C.WeirConsumer) error {
		ptr, n := cString(tp.Topic)
		return takeError(C.weir_consumer_seek(handle, ptr, n, C.int32_t(tp.Partition), target.whence, C.int64_t(target.offset)))
	})
}

// Pause stops fetching these partitions (their positions stay) until Resume.
func (cons *Consumer) Pause(partitions ...TopicPartition) error {
	return cons.pause(partitions, true)
}

// Resume fetches paused partitions again.
func (cons *Consumer) Resume(partitions ...TopicPartition) error {
	return cons.pause(partitions, false)
}

func (cons *Consumer) pause(partitions []TopicPartition, paused bool) error {
	return cons.with(func(handle *C.WeirConsumer) error {
		for _, tp := range partitions {
			ptr, n := cString(tp.Topic)
			if err := takeError(C.weir_consumer_pause(handle, ptr, n, C.int32_t(tp.Partition), C.bool(paused))); err != nil {
				return err
			}
		}
		return nil
	})
}

// Assignment is the partitions this consumer owns now.
func (cons *Consumer) Assignment() []TopicPartition {
	var out []TopicPartition
	_ = cons.with(func(handle *C.WeirConsumer) error {
		return json.Unmarshal([]byte(takeString(C.weir_consumer_assignment(handle))), &out)
	})
	return out
}

// Position is the next offset the core will fetch from an owned partition
// (records buffered here and not yet handed out lie before it); ok is false
// for a partition not owned.
func (cons *Consumer) Position(tp TopicPartition) (offset int64, ok bool) {
	_ = cons.with(func(handle *C.WeirConsumer) error {
		ptr, n := cString(tp.Topic)
		var position C.int64_t
		ok = bool(C.weir_consumer_position(handle, ptr, n, C.int32_t(tp.Partition), &position))
		offset = int64(position)
		return nil
	})
	return offset, ok
}

// Close commits what was handed out (with auto-commit on), leaves the group
// and releases the consumer; a Poll waiting in another goroutine returns
// ErrClosed. Later calls return ErrClosed.
func (cons *Consumer) Close() error {
	cons.closeOnce.Do(func() {
		cons.closing.Store(true)
		_ = cons.with(func(handle *C.WeirConsumer) error {
			C.weir_consumer_wakeup(handle)
			return cons.flushStores(handle)
		})
		_, err := cons.call(context.Background(), func(handle *C.WeirConsumer, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
			return C.weir_consumer_close(handle, queue, token)
		})
		if err != nil && !errors.Is(err, ErrClosed) {
			cons.closeErr = err
		}
		cons.handleMu.Lock()
		C.weir_consumer_free(cons.handle)
		cons.handle = nil
		cons.handleMu.Unlock()
	})
	return cons.closeErr
}
