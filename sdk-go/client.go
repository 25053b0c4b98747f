// Package weir is the Go client for Weir, the event-streaming broker: a cgo
// binding over Weir's Rust client core (the same core the Python and Node
// SDKs ride on), shaped for Go: context.Context on every call that waits,
// iterators, typed errors.
//
//	c, err := weir.NewClient(weir.Config{Brokers: []string{"127.0.0.1:9292"}})
//	p, err := c.NewProducer(weir.ProducerConfig{Linger: 5 * time.Millisecond})
//	md, err := p.ProduceSync(ctx, weir.Record{Topic: "t", Key: k, Value: v})
//	cons, err := c.NewConsumer(weir.ConsumerConfig{GroupID: "g", AutoOffsetReset: "earliest"})
//	err = cons.Subscribe(ctx, "t")
//	for r, err := range cons.Records(ctx) { ... }
//
// Build the static library first (make -C sdk-go); see sdk-go/README.md.
//
// Calls that wait start in the core and return at once; their outcomes come
// back through a completion queue that one goroutine per Client drains from
// Go's own netpoller, so no Rust thread ever calls into Go and a blocked call
// parks a goroutine, not an OS thread. Cancelling a call's context returns
// ctx.Err() promptly; the operation itself may still complete (a send may
// still be written, a commit still land), as with any network client.
package weir

/*
#include "weir.h"
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is what every client of a cluster shares.
type Config struct {
	// Brokers are host:port of one or more brokers (the rest are found).
	Brokers []string
	// ClientID names this client in broker logs.
	ClientID string
	// RequestTimeout bounds each request (0: the core's default).
	RequestTimeout time.Duration
	// ConnectTimeout bounds setting up a connection (0: the core's default).
	ConnectTimeout time.Duration
	// Settings are any other client settings by their Kafka names
	// ("retry.backoff.ms", …). Producer- or consumer-only settings go in
	// ProducerConfig.Settings or ConsumerConfig.Settings.
	Settings map[string]string
}

// Client connects to one cluster. Producers, consumers and the admin client
// it makes share its completion queue; Close closes them all.
type Client struct {
	config Config
	engine *engine
	admin  *Admin

	mu     sync.Mutex
	closed bool
	// Producers and consumers made and not closed yet, in creation order.
	owned []interface{ Close() error }
}

// NewClient checks config and starts the client's completion queue;
// connections are made as calls need them.
func NewClient(config Config) (*Client, error) {
	if len(config.Brokers) == 0 {
		return nil, &Error{Code: CodeInvalidConfig, Message: "Config.Brokers is empty"}
	}
	e, err := newEngine()
	if err != nil {
		return nil, err
	}
	c := &Client{config: config, engine: e}
	admin, err := newAdmin(c)
	if err != nil {
		e.close()
		return nil, err
	}
	c.admin = admin
	return c, nil
}

// Admin is the client's admin client: topics, configs, groups, plugins.
func (c *Client) Admin() *Admin { return c.admin }

// Close closes every producer (flushing it) and consumer (leaving its group)
// made from the client, then the client. Later calls return ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	owned := c.owned
	c.owned = nil
	c.mu.Unlock()
	var errs []error
	for i := len(owned) - 1; i >= 0; i-- {
		if err := owned[i].Close(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	c.engine.close() // fails admin calls still waiting
	c.admin.close()
	return errors.Join(errs...)
}

func (c *Client) own(closer interface{ Close() error }) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.owned = append(c.owned, closer)
	return nil
}

// disown forgets a producer or consumer closed on its own.
func (c *Client) disown(closer interface{ Close() error }) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, owned := range c.owned {
		if owned == closer {
			c.owned = slices.Delete(c.owned, i, i+1)
			return
		}
	}
}

// settings is the core's settings map for this client plus own (from typed
// fields) and extra (the user's Settings), as JSON. required are settings the
// SDK depends on: a user setting that contradicts one is an error.
func (c *Client) settings(extra, own, required map[string]string) ([]byte, error) {
	m := map[string]string{"bootstrap.servers": strings.Join(c.config.Brokers, ",")}
	if c.config.ClientID != "" {
		m["client.id"] = c.config.ClientID
	}
	if c.config.RequestTimeout > 0 {
		m["request.timeout.ms"] = millis(c.config.RequestTimeout)
	}
	if c.config.ConnectTimeout > 0 {
		m["socket.connection.setup.timeout.ms"] = millis(c.config.ConnectTimeout)
	}
	for _, layer := range []map[string]string{c.config.Settings, own, extra} {
		for k, v := range layer {
			m[k] = v
		}
	}
	for k, v := range required {
		if set, ok := m[k]; ok && !strings.EqualFold(strings.TrimSpace(set), v) {
			return nil, &Error{Code: CodeInvalidConfig, Message: fmt.Sprintf("setting %s=%s: the Go SDK needs %s=%s (see the package docs)", k, set, k, v)}
		}
		m[k] = v
	}
	out, _ := json.Marshal(m) // a map of strings always marshals
	return out, nil
}

func millis(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// PartitionForKey is the partition Kafka's murmur2 partitioner (and Weir's
// default one) picks for key among partitionCount partitions.
func PartitionForKey(key []byte, partitionCount int32) int32 {
	if partitionCount <= 0 {
		return 0
	}
	ptr, n := cBytes(key)
	return int32(C.weir_partition_for_key(ptr, n, C.uint32_t(partitionCount)))
}

// errorCodesJSON is the client core's ErrorCode table as JSON (for the test
// that keeps errors_gen.go fresh).
func errorCodesJSON() string {
	return takeString(C.weir_error_codes())
}
