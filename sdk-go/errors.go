package weir

import (
	"errors"
	"fmt"
)

// Code is a Weir error code: the broker's and the client core's one table,
// shared by every SDK (the constants are in errors_gen.go).
type Code uint16

// Error is a failed call: a Code from the table and the message that says
// what happened. Match a kind of failure with errors.Is against the sentinels
// (errors.Is(err, weir.ErrUnknownTopic)) or read the code with errors.As.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "weir: " + e.Code.String()
	}
	return fmt.Sprintf("weir: %s: %s", e.Code, e.Message)
}

// Retriable reports whether trying the same call again may succeed.
func (e *Error) Retriable() bool { return e.Code.Retriable() }

// Is matches any *Error with the same Code when target is a sentinel (an
// *Error without a message), so errors.Is(err, weir.ErrUnknownTopic) holds.
func (e *Error) Is(target error) bool {
	var sentinel *Error
	if !errors.As(target, &sentinel) || sentinel.Message != "" {
		return false
	}
	return sentinel.Code == e.Code
}

// String is the code's name from the table (UnknownTopicOrPartition, …).
func (c Code) String() string {
	if info, ok := codeTable[c]; ok {
		return info.name
	}
	return fmt.Sprintf("Code(%d)", uint16(c))
}

// Retriable reports whether the table marks the code retriable.
func (c Code) Retriable() bool {
	info, ok := codeTable[c]
	return ok && info.retriable
}

// ErrClosed is returned by calls on a client, producer or consumer after its
// Close.
var ErrClosed = errors.New("weir: closed")

// ErrUnusable is returned when the client core cannot run in this process at
// all (used in a child after fork, for one).
var ErrUnusable = errors.New("weir: the client core cannot run here")

// ErrUnknownTopic is the failure for a topic (or partition) the cluster does
// not have: ErrUnknownTopicOrPartition under its short name.
var ErrUnknownTopic = ErrUnknownTopicOrPartition

func newError(code uint16, message string) error {
	if code == 0 {
		return fmt.Errorf("%w: %s", ErrUnusable, message)
	}
	return &Error{Code: Code(code), Message: message}
}
