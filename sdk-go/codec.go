package weir

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// The flat little-endian layouts records and deliveries cross the cgo
// boundary in (one buffer per batch going in, as cgo may not be handed Go
// memory that holds Go pointers; coming out, ranges of the buffers the core
// fetched records into and an index of them). sdk-go/ffi/src/codec.rs is the
// other half and documents the layouts.

var le = binary.LittleEndian

// timestampNow asks the producer to stamp the record with its own clock.
const timestampNow = math.MinInt64

func appendStr16(out []byte, s string) ([]byte, error) {
	if len(s) > math.MaxUint16 {
		return nil, &Error{Code: CodeInvalidRequest, Message: "a topic or header name is longer than 65535 bytes"}
	}
	out = le.AppendUint16(out, uint16(len(s)))
	return append(out, s...), nil
}

func appendBytes32(out []byte, b []byte) ([]byte, error) {
	if b == nil {
		return le.AppendUint32(out, math.MaxUint32), nil // -1: null
	}
	if len(b) > math.MaxInt32 {
		return nil, &Error{Code: CodeMessageTooLarge, Message: "a key, value or header is 2 GiB or more"}
	}
	out = le.AppendUint32(out, uint32(len(b)))
	return append(out, b...), nil
}

// encodeRecords writes records to produce. With manual set, each record's
// Partition is where it goes; otherwise the topic's partitioner decides.
func encodeRecords(records []Record, manual bool) ([]byte, error) {
	size := 4
	for i := range records {
		r := &records[i]
		size += 34 + len(r.Topic) + len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			size += 6 + len(h.Key) + len(h.Value)
		}
	}
	out := make([]byte, 0, size)
	out = le.AppendUint32(out, uint32(len(records)))
	var err error
	for i := range records {
		r := &records[i]
		if out, err = appendStr16(out, r.Topic); err != nil {
			return nil, err
		}
		partition := int32(-1)
		if manual {
			if r.Partition < 0 {
				return nil, &Error{Code: CodeInvalidRequest, Message: "a record's Partition is negative"}
			}
			partition = r.Partition
		}
		out = le.AppendUint32(out, uint32(partition))
		out = le.AppendUint64(out, 0)
		timestamp := int64(timestampNow)
		if !r.Timestamp.IsZero() {
			timestamp = r.Timestamp.UnixMilli()
		}
		out = le.AppendUint64(out, uint64(timestamp))
		if out, err = appendBytes32(out, r.Key); err != nil {
			return nil, err
		}
		if out, err = appendBytes32(out, r.Value); err != nil {
			return nil, err
		}
		out = le.AppendUint32(out, uint32(len(r.Headers)))
		for _, h := range r.Headers {
			if out, err = appendStr16(out, h.Key); err != nil {
				return nil, err
			}
			if out, err = appendBytes32(out, h.Value); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

var errMalformed = errors.New("weir: malformed buffer from the client core")

type reader struct {
	buf []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.buf) {
		r.err = errMalformed
		return nil
	}
	b := r.buf[:n:n]
	r.buf = r.buf[n:]
	return b
}

func (r *reader) u8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if b := r.take(2); b != nil {
		return le.Uint16(b)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return le.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return le.Uint64(b)
	}
	return 0
}

func (r *reader) str16() string { return string(r.take(int(r.u16()))) }

// bytes32 shares the reader's buffer (the caller's copy out of C memory).
func (r *reader) bytes32() []byte {
	n := int32(r.u32())
	if n == -1 || r.err != nil {
		return nil
	}
	return r.take(int(n))
}

// nullLength is the length of a null key, value or header value in the
// views layout.
const nullLength = math.MaxUint32

// viewWords is the size of one record in the views layout: 9 words, the
// offset and the timestamp.
const viewWords = 9*4 + 16

// decodeViews makes consumed records from a views layout and the ranges it
// names, copied out of the core: keys, values and header values are slices
// of the ranges (one copy per fetched buffer, none per record), capped so an
// append to one cannot write over the next.
func decodeViews(data []byte, ranges [][]byte) ([]*Record, error) {
	r := &reader{buf: data}
	topics := make([]string, min(int(r.u32()), len(data)))
	for i := range topics {
		topics[i] = r.str16()
	}
	headerKeys := r.take(int(r.u32()))
	count := int(r.u32())
	words := r.take(count * viewWords)
	headerCount := int(r.u32())
	headerWords := r.take(headerCount * 16)
	if r.err != nil || len(r.buf) != 0 {
		return nil, errMalformed
	}
	malformed := false
	field := func(in []byte, start, length uint32) []byte {
		if length == nullLength {
			return nil
		}
		if length == 0 {
			return []byte{} // present and empty, even in an empty range
		}
		end := uint64(start) + uint64(length)
		if end > uint64(len(in)) {
			malformed = true
			return nil
		}
		return in[start:end:end]
	}
	records := make([]Record, count)
	out := make([]*Record, count)
	for i := range records {
		w := words[i*viewWords:]
		topic, position := le.Uint32(w), le.Uint32(w[8:])
		if uint64(topic) >= uint64(len(topics)) || uint64(position) >= uint64(len(ranges)) {
			return nil, errMalformed
		}
		in := ranges[position]
		rec := &records[i]
		rec.Topic = topics[topic]
		rec.Partition = int32(le.Uint32(w[4:]))
		rec.Key = field(in, le.Uint32(w[12:]), le.Uint32(w[16:]))
		rec.Value = field(in, le.Uint32(w[20:]), le.Uint32(w[24:]))
		first, headers := uint64(le.Uint32(w[28:])), uint64(le.Uint32(w[32:]))
		rec.Offset = int64(le.Uint64(w[36:]))
		rec.Timestamp = time.UnixMilli(int64(le.Uint64(w[44:])))
		if first+headers > uint64(headerCount) {
			return nil, errMalformed
		}
		if headers > 0 {
			rec.Headers = make([]Header, headers)
			for h := range rec.Headers {
				hw := headerWords[(first+uint64(h))*16:]
				rec.Headers[h].Key = string(field(headerKeys, le.Uint32(hw), le.Uint32(hw[4:])))
				rec.Headers[h].Value = field(in, le.Uint32(hw[8:]), le.Uint32(hw[12:]))
			}
		}
		out[i] = rec
	}
	if malformed {
		return nil, errMalformed
	}
	return out, nil
}

// delivery is where one sent record landed, or why it did not.
type delivery struct {
	md  RecordMetadata
	err error
}

func decodeDeliveries(data []byte) ([]delivery, error) {
	r := &reader{buf: data}
	count := int(r.u32())
	if count > len(data) {
		return nil, errMalformed
	}
	out := make([]delivery, count)
	for i := range out {
		if r.u8() == 1 {
			out[i].md.Topic = r.str16()
			out[i].md.Partition = int32(r.u32())
			out[i].md.Offset = int64(r.u64())
			out[i].md.Timestamp = time.UnixMilli(int64(r.u64()))
		} else {
			code := r.u16()
			out[i].err = newError(code, string(r.bytes32()))
		}
	}
	if r.err != nil || len(r.buf) != 0 {
		return nil, errMalformed
	}
	return out, nil
}
