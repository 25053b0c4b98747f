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
	"maps"
	"slices"
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
	// OnAssigned and OnRevoked are called with assignment changes of a group
	// member, on the goroutine that polls, before the Poll that noticed them
	// returns. The change has already happened: a revoked partition's
	// handed-out offsets were committed (with auto-commit) when it left, and
	// its buffered records are dropped before OnRevoked runs. A member fenced
	// by the group sees its partitions revoked the same way.
	OnAssigned func([]TopicPartition)
	OnRevoked  func([]TopicPartition)
	// Settings are any other consumer settings by their Kafka names.
	Settings map[string]string
}

// requiredConsumerSettings are what the SDK's consumer depends on; Settings
// that contradict them are refused.
var requiredConsumerSettings = map[string]string{
	// What commits take is what Poll has handed out, never records still
	// buffered here: offsets are stored as records leave.
	"enable.auto.offset.store": "false",
}

func (cfg ConsumerConfig) settings() map[string]string {
	m := map[string]string{}
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
//
// Records fetched from the core wait in the consumer until Poll hands them
// out. Buffered records of a partition are a run ending just before the
// core's position for it; when the assignment changes (Assign, Subscribe, a
// rebalance), records that are no longer that run — their partition left,
// or came back starting elsewhere — are dropped, never handed out.
type Consumer struct {
	client  *Client
	config  ConsumerConfig
	maxPoll int

	handleMu sync.RWMutex // read: a call on the handle; write: freeing it
	handle   *C.WeirConsumer

	turn chan struct{} // held by the goroutine polling

	// coreMu serialises what this side does to the core's positions and
	// pause flags outside a fetch: seeks, a fetch's re-seeks and rewinds,
	// pause and resume, and the checks of buffered records against the
	// core's positions. Taken before mu; never held while user code runs.
	coreMu sync.Mutex

	mu       sync.Mutex // guards the fields below
	buffered []*Record
	// inflight is the outcome of a fetch still running in the core (one whose
	// Poll was cancelled); its records are buffered when it arrives.
	inflight chan completion
	// seekGen counts seeks per partition and lastSeek is the latest target.
	// A fetch notes the counts when it starts; records of a partition sought
	// since are dropped when it ends and the seek made again (the fetch
	// moved the core's position past it).
	seekGen     map[TopicPartition]uint64
	lastSeek    map[TopicPartition]seekTarget
	inflightGen map[TopicPartition]uint64
	// assignEpoch counts assignment changes (Assign, Subscribe, rebalance
	// events). A fetch that saw it change checks its records against the
	// core's positions: they may come from before the change.
	assignEpoch   uint64
	inflightEpoch uint64
	// paused partitions: their buffered records wait here, not handed out.
	// A partition leaving the assignment forgets its pause (as in Kafka); a
	// partition paused before it is assigned is paused in the core when it is.
	paused map[TopicPartition]bool

	closing   atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

type seekTarget struct {
	whence C.WeirSeek
	offset int64
}

// NewConsumer makes a consumer; Subscribe or Assign says what it reads.
// Settings may not turn on enable.auto.offset.store (the consumer stores
// offsets as Poll hands records out).
func (c *Client) NewConsumer(config ConsumerConfig) (*Consumer, error) {
	settings, err := c.settings(config.Settings, config.settings(), requiredConsumerSettings)
	if err != nil {
		return nil, err
	}
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
		client:   c,
		config:   config,
		maxPoll:  maxPoll,
		handle:   handle,
		turn:     make(chan struct{}, 1),
		seekGen:  map[TopicPartition]uint64{},
		lastSeek: map[TopicPartition]seekTarget{},
		paused:   map[TopicPartition]bool{},
	}
	if err := c.own(cons); err != nil {
		C.weir_consumer_free(handle)
		return nil, err
	}
	return cons, nil
}

// with runs use on the live handle; ErrClosed once Close has begun, and for
// a call that failed because Close raced it (the core refuses a closed
// consumer's calls in its own terms).
func (cons *Consumer) with(use func(*C.WeirConsumer) error) error {
	if cons.closing.Load() {
		return ErrClosed
	}
	err := cons.withHandle(use)
	if err != nil && cons.closing.Load() && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return ErrClosed
	}
	return err
}

// withHandle runs use on the handle until it is freed (Close's own calls).
func (cons *Consumer) withHandle(use func(*C.WeirConsumer) error) error {
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
// topics; the group spreads their partitions over its members. Partitions
// read through Assign before are left (their buffered records dropped).
func (cons *Consumer) Subscribe(ctx context.Context, topics ...string) error {
	if topics == nil {
		topics = []string{}
	}
	list, _ := json.Marshal(topics)
	return cons.subscribe(ctx, func(handle *C.WeirConsumer, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		ptr, n := cBytes(list)
		return C.weir_consumer_subscribe(handle, queue, token, ptr, n, nil, 0)
	})
}

// SubscribePattern joins the group as a member reading every topic whose
// whole name matches the regular expression pattern (topics created later
// included).
func (cons *Consumer) SubscribePattern(ctx context.Context, pattern string) error {
	if pattern == "" {
		return &Error{Code: CodeInvalidRequest, Message: "an empty topic pattern"}
	}
	return cons.subscribe(ctx, func(handle *C.WeirConsumer, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		ptr, n := cString(pattern)
		return C.weir_consumer_subscribe(handle, queue, token, nil, 0, ptr, n)
	})
}

func (cons *Consumer) subscribe(ctx context.Context, begin func(*C.WeirConsumer, *C.WeirQueue, C.uint64_t) *C.WeirError) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Counted before the core changes anything: a fetch running across the
	// change checks its records.
	cons.bumpEpoch()
	if _, err := cons.call(ctx, begin); err != nil {
		return err
	}
	// The core left every assigned partition: their records and pauses go.
	assigned := map[TopicPartition]bool{}
	for _, tp := range cons.Assignment() {
		assigned[tp] = true
	}
	cons.mu.Lock()
	for tp := range cons.paused {
		if !assigned[tp] {
			delete(cons.paused, tp)
		}
	}
	cons.mu.Unlock()
	cons.coreMu.Lock()
	defer cons.coreMu.Unlock()
	cons.revalidate(nil)
	return nil
}

// Assign reads exactly these partitions, outside any group, from the offset
// AutoOffsetReset says (then Seek to start elsewhere: Assign does not read
// committed offsets, and nothing commits in the background in this mode;
// CommitOffsets and Committed work with a GroupID). Partitions assigned
// before and kept keep their position, buffered records and pause; others
// leave, with their buffered records and pause.
func (cons *Consumer) Assign(ctx context.Context, partitions ...TopicPartition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	keep := map[TopicPartition]bool{}
	for _, tp := range partitions {
		keep[tp] = true
	}
	leaving := func() []TopicPartition {
		var gone []TopicPartition
		cons.mu.Lock()
		defer cons.mu.Unlock()
		for _, r := range cons.buffered {
			if tp := (TopicPartition{r.Topic, r.Partition}); !keep[tp] {
				gone = append(gone, tp)
			}
		}
		return gone
	}
	cons.bumpEpoch()
	cons.dropPartitions(leaving())
	list := make([][2]any, len(partitions))
	for i, tp := range partitions {
		list[i] = [2]any{tp.Topic, tp.Partition}
	}
	body, _ := json.Marshal(list)
	_, err := cons.call(ctx, func(handle *C.WeirConsumer, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		ptr, n := cBytes(body)
		return C.weir_consumer_assign(handle, queue, token, ptr, n)
	})
	if err != nil {
		return err
	}
	// Records a fetch buffered while the core changed, of partitions that
	// left, go too.
	cons.dropPartitions(leaving())
	cons.coreMu.Lock()
	defer cons.coreMu.Unlock()
	var repause []TopicPartition
	cons.mu.Lock()
	for tp := range cons.paused {
		if keep[tp] {
			repause = append(repause, tp)
		} else {
			delete(cons.paused, tp)
		}
	}
	cons.mu.Unlock()
	// Newly assigned partitions start unpaused in the core.
	cons.pauseInCore(repause, true)
	cons.revalidate(nil)
	return nil
}

func (cons *Consumer) bumpEpoch() {
	cons.mu.Lock()
	cons.assignEpoch++
	cons.mu.Unlock()
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
	if err := ctx.Err(); err != nil {
		return nil, err
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
		// Revocations first: no buffered record of a partition that left is
		// handed out.
		cons.rebalanced()
		out, again, err := cons.handOut(max)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 {
			return out, nil
		}
		if again {
			continue
		}
		if err := cons.fetch(ctx); err != nil {
			return nil, err
		}
	}
}

// Records iterates over records as Poll returns them. An error is yielded
// with a nil record; iteration goes on after a retriable *Error and ends
// after any other (ctx's end, ErrClosed, a refusal). Break out to stop.
func (cons *Consumer) Records(ctx context.Context) iter.Seq2[*Record, error] {
	return func(yield func(*Record, error) bool) {
		for {
			record, err := cons.Poll(ctx)
			if err != nil {
				var werr *Error
				retriable := errors.As(err, &werr) && werr.Retriable()
				if !yield(nil, err) || !retriable || ctx.Err() != nil {
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

// handOut takes up to max buffered records of partitions not paused and
// stores their offsets in the core as what commits take (before the records
// reach the caller, so a commit on revoke covers them). Records of
// partitions the core refuses to store for (revoked since the last look at
// rebalance events, or not assigned) are dropped instead; again is true
// when that left nothing to hand out but more may be buffered.
func (cons *Consumer) handOut(max int) (out []*Record, again bool, err error) {
	cons.mu.Lock()
	if len(cons.paused) == 0 {
		// Nothing paused: the first max records, without a look-up each.
		n := min(max, len(cons.buffered))
		out = make([]*Record, n)
		copy(out, cons.buffered)
		rest := copy(cons.buffered, cons.buffered[n:])
		clear(cons.buffered[rest:])
		cons.buffered = cons.buffered[:rest]
	} else {
		kept := cons.buffered[:0]
		for _, r := range cons.buffered {
			if len(out) < max && !cons.paused[TopicPartition{r.Topic, r.Partition}] {
				out = append(out, r)
			} else {
				kept = append(kept, r)
			}
		}
		clear(cons.buffered[len(kept):])
		cons.buffered = kept
	}
	cons.mu.Unlock()
	if len(out) == 0 {
		return nil, false, nil
	}
	// Records of a partition come in runs: one map write per run.
	next := map[TopicPartition]int64{}
	var last *Record
	for i, r := range out {
		if last != nil && (r.Partition != last.Partition || r.Topic != last.Topic) {
			next[TopicPartition{last.Topic, last.Partition}] = last.Offset + 1
		}
		if last = r; i == len(out)-1 {
			next[TopicPartition{r.Topic, r.Partition}] = r.Offset + 1
		}
	}
	entries := make([][3]any, 0, len(next))
	for tp, offset := range next {
		entries = append(entries, [3]any{tp.Topic, tp.Partition, offset})
	}
	body, _ := json.Marshal(entries)
	var rejected []TopicPartition
	err = cons.with(func(handle *C.WeirConsumer) error {
		ptr, n := cBytes(body)
		var refused *C.char
		if err := takeError(C.weir_consumer_store_offsets(handle, ptr, n, &refused)); err != nil {
			return err
		}
		if refused != nil {
			if err := json.Unmarshal([]byte(takeString(refused)), &rejected); err != nil {
				return errMalformed
			}
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if len(rejected) == 0 {
		return out, false, nil
	}
	gone := make(map[TopicPartition]bool, len(rejected))
	for _, tp := range rejected {
		gone[tp] = true
	}
	handed := out[:0]
	for _, r := range out {
		if !gone[TopicPartition{r.Topic, r.Partition}] {
			handed = append(handed, r)
		}
	}
	cons.dropPartitions(rejected)
	return handed, len(handed) == 0, nil
}

// fetch runs one fetch from the core (or waits for the one in flight) and
// buffers what it returns; rebalance events it brought are handled first.
func (cons *Consumer) fetch(ctx context.Context) error {
	cons.mu.Lock()
	inflight := cons.inflight
	cons.mu.Unlock()
	if inflight == nil {
		outcome := make(chan completion, 1)
		cons.mu.Lock()
		cons.inflightGen = maps.Clone(cons.seekGen)
		cons.inflightEpoch = cons.assignEpoch
		cons.inflight = outcome
		cons.mu.Unlock()
		err := cons.with(func(handle *C.WeirConsumer) error {
			_, err := cons.client.engine.start(func(c completion) { outcome <- c }, func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
				return C.weir_consumer_poll(handle, queue, token, C.uint64_t(pollWait.Milliseconds()), C.uint32_t(cons.maxPoll))
			})
			return err
		})
		if err != nil {
			cons.mu.Lock()
			cons.inflight = nil
			cons.mu.Unlock()
			return err
		}
		inflight = outcome
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
	err := done.err()
	var records []*Record
	if err == nil {
		records, err = decodeViews(done.data, done.ranges)
	}
	// Assignment changes first: they drop what is buffered for partitions
	// that left (records of this fetch may be of a partition that came back:
	// they are checked below).
	cons.rebalanced()
	cons.coreMu.Lock()
	defer cons.coreMu.Unlock()
	cons.mu.Lock()
	cons.inflight = nil
	// Seeks made while the fetch ran win over it: their partitions' records
	// from it are dropped and the seeks made again.
	var again map[TopicPartition]seekTarget
	for tp, gen := range cons.seekGen {
		if cons.inflightGen[tp] != gen {
			if again == nil {
				again = map[TopicPartition]seekTarget{}
			}
			again[tp] = cons.lastSeek[tp]
		}
	}
	cons.inflightGen = nil
	changed := cons.assignEpoch != cons.inflightEpoch
	fetchedFrom := map[TopicPartition]bool{}
	kept := records[:0:0]
	if again == nil {
		kept = records
	}
	pausedHere := false
	// A fetch answers partition by partition: the maps are consulted once
	// per run of one partition's records, not per record.
	var run TopicPartition
	keepRun := false
	for at, r := range records {
		if at == 0 || r.Partition != run.Partition || r.Topic != run.Topic {
			run = TopicPartition{r.Topic, r.Partition}
			_, sought := again[run]
			keepRun = !sought
			if keepRun {
				fetchedFrom[run] = true
				pausedHere = pausedHere || cons.paused[run]
			}
		}
		if keepRun && again != nil {
			kept = append(kept, r)
		}
	}
	cons.buffered = append(cons.buffered, kept...)
	cons.mu.Unlock()
	for tp, target := range again {
		// coreMu is held: no newer seek can come in between.
		_ = cons.seek(tp, target) // a partition no longer owned needs none
	}
	if changed && len(fetchedFrom) > 0 {
		cons.revalidate(fetchedFrom)
	}
	if pausedHere {
		fromThisFetch := make(map[*Record]bool, len(kept))
		for _, r := range kept {
			fromThisFetch[r] = true
		}
		cons.rewindPaused(fromThisFetch)
	}
	return err
}

// rewindPaused gives back to the core this fetch's records of partitions
// paused here (the core fetched them before it heard of the pause, or the
// partition was paused before it was assigned): they are dropped, the core
// is sought back to the first of them and the partition paused there, so
// paused partitions never grow the buffer. Called with coreMu held.
func (cons *Consumer) rewindPaused(fromThisFetch map[*Record]bool) {
	first := map[TopicPartition]int64{}
	cons.mu.Lock()
	kept := cons.buffered[:0]
	for _, r := range cons.buffered {
		tp := TopicPartition{r.Topic, r.Partition}
		if fromThisFetch[r] && cons.paused[tp] {
			if offset, ok := first[tp]; !ok || r.Offset < offset {
				first[tp] = r.Offset
			}
			continue
		}
		kept = append(kept, r)
	}
	clear(cons.buffered[len(kept):])
	cons.buffered = kept
	cons.mu.Unlock()
	for tp, offset := range first {
		_ = cons.seek(tp, seekTarget{C.WEIR_SEEK_OFFSET, offset})
	}
	cons.pauseInCore(slices.Collect(maps.Keys(first)), true)
}

// revalidate drops the buffered records of partitions (nil: all) that are
// no longer the run just before the core's position: their partition is not
// assigned, or was assigned again and starts elsewhere. Called with coreMu
// held, so no seek or fetch moves a position meanwhile.
func (cons *Consumer) revalidate(partitions map[TopicPartition]bool) {
	last := map[TopicPartition]int64{}
	cons.mu.Lock()
	for _, r := range cons.buffered {
		tp := TopicPartition{r.Topic, r.Partition}
		if partitions == nil || partitions[tp] {
			last[tp] = max(last[tp], r.Offset)
		}
	}
	cons.mu.Unlock()
	var stale []TopicPartition
	for tp, offset := range last {
		if position, ok := cons.Position(tp); !ok || position != offset+1 {
			stale = append(stale, tp)
		}
	}
	cons.dropPartitions(stale)
}

type rebalanceEvent struct {
	Kind       string           `json:"kind"`
	Partitions []TopicPartition `json:"partitions"`
}

// rebalanced handles the assignment changes the core noted: buffered records
// and pauses of partitions that left are dropped, partitions paused here
// and assigned again are paused in the core, then the callbacks run.
func (cons *Consumer) rebalanced() {
	var text string
	_ = cons.with(func(handle *C.WeirConsumer) error {
		text = takeString(C.weir_consumer_rebalance_events(handle))
		return nil
	})
	if text == "" || text == "[]" {
		return
	}
	var events []rebalanceEvent
	if json.Unmarshal([]byte(text), &events) != nil {
		return
	}
	for _, event := range events {
		partitions := event.Partitions
		var callback func([]TopicPartition)
		cons.mu.Lock()
		cons.assignEpoch++
		var repause []TopicPartition
		switch event.Kind {
		case "assigned":
			callback = cons.config.OnAssigned
			for _, tp := range partitions {
				if cons.paused[tp] {
					repause = append(repause, tp)
				}
			}
		case "revoked":
			callback = cons.config.OnRevoked
			for _, tp := range partitions {
				delete(cons.paused, tp)
			}
		}
		cons.mu.Unlock()
		if event.Kind == "revoked" {
			cons.dropPartitions(partitions)
		}
		if len(repause) > 0 {
			cons.coreMu.Lock()
			cons.pauseInCore(repause, true)
			cons.coreMu.Unlock()
		}
		if callback != nil {
			callback(partitions)
		}
	}
}

func (cons *Consumer) dropPartitions(partitions []TopicPartition) {
	if len(partitions) == 0 {
		return
	}
	gone := make(map[TopicPartition]bool, len(partitions))
	cons.mu.Lock()
	defer cons.mu.Unlock()
	for _, tp := range partitions {
		gone[tp] = true
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
	if cons.closing.Load() {
		return ErrClosed
	}
	// One seek at a time, and none while a fetch re-makes earlier ones.
	cons.coreMu.Lock()
	defer cons.coreMu.Unlock()
	// Counted before the core moves: a fetch that started earlier sees the
	// count changed when it ends, whatever the interleaving.
	cons.mu.Lock()
	cons.seekGen[tp]++
	cons.lastSeek[tp] = target
	cons.mu.Unlock()
	if err := cons.seek(tp, target); err != nil {
		return err
	}
	cons.dropPartitions([]TopicPartition{tp})
	return nil
}

func (cons *Consumer) seek(tp TopicPartition, target seekTarget) error {
	return cons.with(func(handle *C.WeirConsumer) error {
		ptr, n := cString(tp.Topic)
		return takeError(C.weir_consumer_seek(handle, ptr, n, C.int32_t(tp.Partition), target.whence, C.int64_t(target.offset)))
	})
}

// Pause stops fetching these partitions until Resume: no Poll returns a
// record of them meanwhile (records already fetched wait in the consumer).
// A partition that leaves the assignment forgets its pause; one paused
// before it is assigned starts paused.
func (cons *Consumer) Pause(partitions ...TopicPartition) error {
	return cons.pause(partitions, true)
}

// Resume fetches paused partitions again.
func (cons *Consumer) Resume(partitions ...TopicPartition) error {
	return cons.pause(partitions, false)
}

func (cons *Consumer) pause(partitions []TopicPartition, paused bool) error {
	if cons.closing.Load() {
		return ErrClosed
	}
	cons.coreMu.Lock()
	defer cons.coreMu.Unlock()
	cons.mu.Lock()
	for _, tp := range partitions {
		if paused {
			cons.paused[tp] = true
		} else {
			delete(cons.paused, tp)
		}
	}
	cons.mu.Unlock()
	return cons.pauseInCore(partitions, paused)
}

// pauseInCore sets the core's pause flag of partitions (a partition not
// assigned there has none). Called with coreMu held.
func (cons *Consumer) pauseInCore(partitions []TopicPartition, paused bool) error {
	if len(partitions) == 0 {
		return nil
	}
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
		_ = cons.withHandle(func(handle *C.WeirConsumer) error {
			C.weir_consumer_wakeup(handle)
			return nil
		})
		var err error
		werr := cons.withHandle(func(handle *C.WeirConsumer) error {
			_, err = cons.client.engine.call(context.Background(), func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
				return C.weir_consumer_close(handle, queue, token)
			})
			return nil
		})
		if err == nil {
			err = werr
		}
		if err != nil && !errors.Is(err, ErrClosed) {
			cons.closeErr = err
		}
		cons.handleMu.Lock()
		C.weir_consumer_free(cons.handle)
		cons.handle = nil
		cons.handleMu.Unlock()
		cons.mu.Lock()
		cons.buffered = nil
		cons.mu.Unlock()
		cons.client.disown(cons)
	})
	return cons.closeErr
}
