package weir

/*
#include "weir.h"
*/
import "C"

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"
)

// Acks is how many replicas acknowledge a record before it counts as sent.
type Acks int8

const (
	// AcksAll waits for every in-sync replica (the default).
	AcksAll Acks = iota
	// AcksLeader waits for the partition leader only.
	AcksLeader
	// AcksNone does not wait; offsets come back as -1.
	AcksNone
)

// ProducerConfig configures a producer; zero values take the core's defaults.
type ProducerConfig struct {
	Acks Acks
	// Linger is how long a batch waits for more records.
	Linger time.Duration
	// Idempotent deduplicates retries at the broker (nil: on, the default;
	// needs AcksAll).
	Idempotent *bool
	// Compression is "none", "lz4" or "zstd" ("": none).
	Compression string
	// BatchBytes is the largest batch per partition.
	BatchBytes int
	// BufferBytes bounds the records buffered but not yet sent; past it,
	// Produce waits for room (or its context).
	BufferBytes int
	// DeliveryTimeout bounds how long a record may take to be acknowledged,
	// retries included.
	DeliveryTimeout time.Duration
	// ManualPartitions sends each record to its Record.Partition instead of
	// the partition the topic's partitioner picks.
	ManualPartitions bool
	// Settings are any other producer settings by their Kafka names.
	Settings map[string]string
}

// Bool is a pointer to v, for optional settings such as Idempotent.
func Bool(v bool) *bool { return &v }

func (cfg ProducerConfig) settings() map[string]string {
	m := map[string]string{}
	switch cfg.Acks {
	case AcksLeader:
		m["acks"] = "1"
	case AcksNone:
		m["acks"] = "0"
	default:
		m["acks"] = "all"
	}
	if cfg.Linger > 0 {
		m["linger.ms"] = millis(cfg.Linger)
	}
	if cfg.Idempotent != nil {
		m["enable.idempotence"] = strconv.FormatBool(*cfg.Idempotent)
	}
	if cfg.Compression != "" {
		m["compression.type"] = cfg.Compression
	}
	if cfg.BatchBytes > 0 {
		m["batch.size"] = strconv.Itoa(cfg.BatchBytes)
	}
	if cfg.BufferBytes > 0 {
		m["buffer.memory"] = strconv.Itoa(cfg.BufferBytes)
	}
	if cfg.DeliveryTimeout > 0 {
		m["delivery.timeout.ms"] = millis(cfg.DeliveryTimeout)
	}
	return m
}

// Producer sends records. Sends from one goroutine keep their order (per
// partition, as on the wire); a Producer is safe for concurrent use.
type Producer struct {
	client *Client
	manual bool

	mu      sync.RWMutex // read: a call on the handle; write: closing, freeing it
	handle  *C.WeirProducer
	closing bool // Close has begun: calls are refused with ErrClosed

	callbacks *callbackQueue
	// Produce calls whose promise has not run yet, per flush epoch: Flush
	// waits for the epochs before its own (outcomes of different partitions
	// arrive in any order, so their count alone would not do).
	outstanding outstanding

	sendMu  sync.Mutex
	nextSeq uint64 // of the next queued Produce
	// Outcomes arrive in any order; promises run in send order.
	releaseMu sync.Mutex
	nextRun   uint64
	ready     map[uint64]func()

	closeOnce sync.Once
	closeErr  error
}

// NewProducer makes a producer; it connects as sends need it.
func (c *Client) NewProducer(config ProducerConfig) (*Producer, error) {
	settings, err := c.settings(config.Settings, config.settings(), nil)
	if err != nil {
		return nil, err
	}
	ptr, n := cBytes(settings)
	var handle *C.WeirProducer
	if err := takeError(C.weir_producer_new(ptr, n, &handle)); err != nil {
		return nil, err
	}
	p := &Producer{client: c, manual: config.ManualPartitions, handle: handle, callbacks: newCallbackQueue()}
	if err := c.own(p); err != nil {
		C.weir_producer_free(handle)
		p.callbacks.stop()
		return nil, err
	}
	return p, nil
}

// with runs use on the live handle, or returns ErrClosed.
func (p *Producer) with(use func(*C.WeirProducer) error) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.handle == nil || p.closing {
		return ErrClosed
	}
	return use(p.handle)
}

// ProduceSync sends records and waits until each is acknowledged: one
// RecordMetadata per record, in order. On failure it returns the first
// error; records after the first one the producer refused are not sent, and
// the metadata of records that were acknowledged is still filled in. A
// cancelled ctx returns ctx.Err() at once; records already handed over may
// still be written.
func (p *Producer) ProduceSync(ctx context.Context, records ...Record) ([]RecordMetadata, error) {
	if len(records) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err // nothing sent
	}
	buf, err := encodeRecords(records, p.manual)
	if err != nil {
		return nil, err
	}
	var done completion
	err = p.with(func(handle *C.WeirProducer) error {
		var callErr error
		done, callErr = p.client.engine.call(ctx, func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
			ptr, n := cBytes(buf)
			return C.weir_producer_send(handle, queue, token, ptr, n)
		})
		return callErr
	})
	if err != nil {
		return nil, err
	}
	deliveries, err := decodeDeliveries(done.data)
	if err != nil {
		return nil, err
	}
	out := make([]RecordMetadata, len(records))
	var first error
	for i, d := range deliveries {
		if d.err != nil {
			if first == nil {
				first = d.err
			}
			continue
		}
		out[i] = d.md
	}
	return out, first
}

// Produce queues record behind earlier sends and returns once the producer
// has taken it, waiting (up to ctx) while its buffer is full. promise, if not
// nil, is called with where the record landed or why it did not — on the
// producer's own goroutine, one call at a time, in the order the records
// were queued. A promise may call Produce, but
// not Flush, Close or Client.Close (they wait for the promises to run).
func (p *Producer) Produce(ctx context.Context, record Record, promise func(RecordMetadata, error)) error {
	if err := ctx.Err(); err != nil {
		return err // nothing queued
	}
	buf, err := encodeRecords([]Record{record}, p.manual)
	if err != nil {
		return err
	}
	epoch := p.outstanding.add()
	for {
		var queued bool
		p.sendMu.Lock() // sequence numbers in the order sends are queued
		seq := p.nextSeq
		deliver := func(c completion) {
			if promise == nil {
				p.release(seq, func() { p.outstanding.done(epoch) })
				return
			}
			md, err := c.metadata()
			p.release(seq, func() {
				p.callbacks.push(func() {
					defer p.outstanding.done(epoch)
					promise(md, err)
				})
			})
		}
		err := p.with(func(handle *C.WeirProducer) error {
			token, err := p.client.engine.start(deliver, func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
				ptr, n := cBytes(buf)
				var accepted C.bool
				raw := C.weir_producer_send_nowait(handle, queue, token, ptr, n, &accepted)
				queued = bool(accepted)
				return raw
			})
			if err == nil && !queued {
				p.client.engine.forget(token) // no outcome comes for a record not taken
			}
			return err
		})
		if err == nil && queued {
			p.nextSeq++
		}
		p.sendMu.Unlock()
		if err != nil {
			p.outstanding.done(epoch)
			return err
		}
		if queued {
			return nil
		}
		// Full: wait for room, then try again.
		err = p.with(func(handle *C.WeirProducer) error {
			_, err := p.client.engine.call(ctx, func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
				return C.weir_producer_wait_room(handle, queue, token)
			})
			return err
		})
		if err != nil {
			p.outstanding.done(epoch)
			return err
		}
	}
}

// release runs then (which must not block) once every earlier send's
// outcome has been released.
func (p *Producer) release(seq uint64, then func()) {
	p.releaseMu.Lock()
	defer p.releaseMu.Unlock()
	if p.ready == nil {
		p.ready = map[uint64]func(){}
	}
	p.ready[seq] = then
	for {
		next, ok := p.ready[p.nextRun]
		if !ok {
			return
		}
		delete(p.ready, p.nextRun)
		p.nextRun++
		next()
	}
}

// metadata reads a one-record delivery completion.
func (c completion) metadata() (RecordMetadata, error) {
	if err := c.err(); err != nil {
		return RecordMetadata{}, err
	}
	deliveries, err := decodeDeliveries(c.data)
	if err != nil {
		return RecordMetadata{}, err
	}
	if len(deliveries) != 1 {
		return RecordMetadata{}, errMalformed
	}
	return deliveries[0].md, deliveries[0].err
}

// Flush waits until everything sent before it is acknowledged (or failed),
// and every promise of those sends has run.
func (p *Producer) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	wait := p.outstanding.cut()
	err := p.with(func(handle *C.WeirProducer) error {
		_, err := p.client.engine.call(ctx, func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
			return C.weir_producer_flush(handle, queue, token)
		})
		return err
	})
	if err != nil {
		return err
	}
	return wait(ctx)
}

// Close refuses further sends (ErrClosed), flushes (waiting as long as the
// delivery timeout allows), runs every outstanding promise, then releases the
// producer. Do not call it (or Client.Close) from a promise.
func (p *Producer) Close() error {
	p.closeOnce.Do(func() {
		// Once every call already on the handle is done, later ones are
		// refused: nothing can be queued behind the close.
		p.mu.Lock()
		p.closing = true
		handle := p.handle
		p.mu.Unlock()
		_, err := p.client.engine.call(context.Background(), func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
			return C.weir_producer_close(handle, queue, token)
		})
		if err != nil && !errors.Is(err, ErrClosed) {
			p.closeErr = err
		}
		// Every promise runs before Close returns (an engine already closed
		// fails the sends still out, which runs their promises too).
		_ = p.outstanding.cut()(context.Background())
		p.callbacks.stop()
		p.mu.Lock()
		C.weir_producer_free(p.handle)
		p.handle = nil
		p.mu.Unlock()
		p.client.disown(p)
	})
	return p.closeErr
}

// callbackQueue runs functions one at a time, in push order, on its own
// goroutine; push never blocks (the completion poller calls it).
type callbackQueue struct {
	mu      sync.Mutex
	pending []func()
	running bool
	stopped bool
}

func newCallbackQueue() *callbackQueue {
	return &callbackQueue{}
}

func (q *callbackQueue) push(f func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	q.pending = append(q.pending, f)
	if !q.running {
		q.running = true
		go q.run()
	}
}

func (q *callbackQueue) run() {
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		f := q.pending[0]
		q.pending[0] = nil
		q.pending = q.pending[1:]
		q.mu.Unlock()
		f()
	}
}

func (q *callbackQueue) stop() {
	q.mu.Lock()
	q.stopped = true
	q.mu.Unlock()
}

// outstanding counts sends whose outcome has not been handled, per epoch.
type outstanding struct {
	mu      sync.Mutex
	epoch   uint64
	counts  map[uint64]int
	changed chan struct{} // closed and replaced when a count reaches 0
}

// add counts a send in the current epoch.
func (o *outstanding) add() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts = map[uint64]int{}
		o.changed = make(chan struct{})
	}
	o.counts[o.epoch]++
	return o.epoch
}

// done marks a send of epoch handled.
func (o *outstanding) done(epoch uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts[epoch]--; o.counts[epoch] == 0 {
		delete(o.counts, epoch)
		close(o.changed)
		o.changed = make(chan struct{})
	}
}

// cut starts a new epoch and returns a wait for every earlier send.
func (o *outstanding) cut() func(context.Context) error {
	o.mu.Lock()
	before := o.epoch
	o.epoch++
	o.mu.Unlock()
	return func(ctx context.Context) error {
		for {
			o.mu.Lock()
			busy := false
			for epoch := range o.counts {
				if epoch <= before {
					busy = true
					break
				}
			}
			changed := o.changed
			o.mu.Unlock()
			if !busy {
				return nil
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}
