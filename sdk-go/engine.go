package weir

/*
#cgo CFLAGS: -I${SRCDIR}/include
#cgo LDFLAGS: ${SRCDIR}/lib/libweir_ffi.a -ldl -lm -lpthread -lgcc_s
#include <stdlib.h>
#include "weir.h"
*/
import "C"

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// completion is one finished call, its bytes copied into Go memory.
type completion struct {
	kind C.WeirKind
	code uint16
	data []byte
	// Of consumed records: the ranges of the buffers the core fetched them
	// into, copied (data is the views layout, whose positions are in these).
	ranges [][]byte
	// The engine closed before the call finished.
	closed bool
}

// err is the completion's error, or nil.
func (c completion) err() error {
	if c.closed {
		return ErrClosed
	}
	if c.kind != C.WEIR_KIND_ERROR {
		return nil
	}
	return newError(c.code, string(c.data))
}

// engine is one completion queue and the goroutine that drains it.
//
// Calls that wait (sends, polls, commits, admin calls) start in Rust and
// return at once; their outcomes are pushed to the queue, whose descriptor
// becomes readable. The poller goroutine waits on a dup of that descriptor in
// Go's own netpoller (no OS thread is parked on it), drains the queue with
// one cgo call, copies each outcome into Go memory and hands it to whoever
// waits for its token. No Rust thread ever calls into Go.
type engine struct {
	mu      sync.RWMutex // read: starting a call; write: closing
	queue   *C.WeirQueue
	file    *os.File
	closed  bool
	next    atomic.Uint64
	waiters sync.Map // token -> func(completion)
	done    chan struct{}
}

func newEngine() (*engine, error) {
	var queue *C.WeirQueue
	if err := takeError(C.weir_queue_new(&queue)); err != nil {
		return nil, err
	}
	// Under ForkLock, so a concurrent exec cannot inherit the dup before it
	// is marked close-on-exec.
	syscall.ForkLock.RLock()
	fd, err := syscall.Dup(int(C.weir_queue_fd(queue)))
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		C.weir_queue_free(queue)
		return nil, err
	}
	// The queue's socket is non-blocking already (the flag is shared with
	// the dup): os.NewFile then registers it with the netpoller.
	e := &engine{queue: queue, file: os.NewFile(uintptr(fd), "weir-completions"), done: make(chan struct{})}
	go e.poll()
	return e, nil
}

func (e *engine) poll() {
	defer close(e.done)
	buf := make([]byte, 64)
	for {
		if _, err := e.file.Read(buf); err != nil {
			return // closed
		}
		e.drain()
	}
}

func (e *engine) drain() {
	var items *C.WeirCompletion
	var n C.size_t
	owner := C.weir_queue_drain(e.queue, &items, &n)
	if owner == nil {
		return
	}
	batch := unsafe.Slice(items, int(n))
	done := make([]struct {
		token uint64
		c     completion
	}, len(batch))
	for i, item := range batch {
		done[i].token = uint64(item.token)
		done[i].c = completion{kind: item.kind, code: uint16(item.code)}
		if item.len > 0 {
			done[i].c.data = append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(item.data)), int(item.len))...)
		}
		if item.range_count > 0 {
			// One copy of each fetched range: records are slices of these.
			ranges := unsafe.Slice(item.ranges, int(item.range_count))
			done[i].c.ranges = make([][]byte, len(ranges))
			for r, got := range ranges {
				if got.len > 0 {
					done[i].c.ranges[r] = append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(got.data)), int(got.len))...)
				}
			}
		}
	}
	C.weir_completions_free(owner)
	for _, d := range done {
		if waiter, ok := e.waiters.LoadAndDelete(d.token); ok {
			waiter.(func(completion))(d.c)
		}
	}
}

// start registers deliver under a fresh token, then runs begin with it. The
// waiter is in place before Rust can finish the call. deliver must not block.
func (e *engine) start(deliver func(completion), begin func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError) (uint64, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return 0, ErrClosed
	}
	token := e.next.Add(1)
	e.waiters.Store(token, deliver)
	if err := takeError(begin(e.queue, C.uint64_t(token))); err != nil {
		e.waiters.Delete(token)
		return 0, err
	}
	return token, nil
}

// forget drops the waiter of a call whose outcome will not be needed.
func (e *engine) forget(token uint64) { e.waiters.Delete(token) }

// call starts begin and waits for its outcome or ctx. On ctx's end the call
// is forgotten (it still runs to its end in Rust) and ctx's error returned; a
// ctx already ended starts nothing.
func (e *engine) call(ctx context.Context, begin func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError) (completion, error) {
	if err := ctx.Err(); err != nil {
		return completion{}, err
	}
	outcome := make(chan completion, 1)
	token, err := e.start(func(c completion) { outcome <- c }, begin)
	if err != nil {
		return completion{}, err
	}
	select {
	case c := <-outcome:
		return c, c.err()
	case <-ctx.Done():
		e.forget(token)
		return completion{}, ctx.Err()
	case <-e.done:
		return completion{}, ErrClosed
	}
}

// close stops the poller, fails every pending call with ErrClosed and
// frees the queue. Calls still in flight in Rust finish there: the freed
// queue drops their outcomes (and keeps its socket open until the last of
// them is done, so no late wake-up can raise SIGPIPE on a Rust thread).
func (e *engine) close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	e.mu.Unlock()
	_ = e.file.Close()
	<-e.done
	C.weir_queue_free(e.queue)
	e.queue = nil
	e.waiters.Range(func(token, waiter any) bool {
		e.waiters.Delete(token)
		waiter.(func(completion))(completion{closed: true})
		return true
	})
}

// takeError converts and frees a returned WeirError (nil: success).
func takeError(raw *C.WeirError) error {
	if raw == nil {
		return nil
	}
	defer C.weir_error_free(raw)
	return newError(uint16(C.weir_error_code(raw)), C.GoString(C.weir_error_message(raw)))
}

// takeString converts and frees a returned string.
func takeString(raw *C.char) string {
	if raw == nil {
		return ""
	}
	defer C.weir_string_free(raw)
	return C.GoString(raw)
}

// cBytes is a pointer to b's bytes for the length of one cgo call (Go memory
// holding no Go pointers may be passed this way).
func cBytes(b []byte) (*C.uint8_t, C.size_t) {
	if len(b) == 0 {
		return nil, 0
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0])), C.size_t(len(b))
}

// cString is s's bytes for the length of one cgo call.
func cString(s string) (*C.uint8_t, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}
