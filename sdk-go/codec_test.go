package weir

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

// consumedCompletion is a fetch's outcome as the core delivers it: records
// in the views layout, their fields in one range (sdk-go/ffi/src/codec.rs).
func consumedCompletion(records []Record) completion {
	var fields, headerKeys, index, headerWords []byte
	var topics []string
	place := func(b []byte) {
		if b == nil {
			index = le.AppendUint32(le.AppendUint32(index, 0), nullLength)
			return
		}
		index = le.AppendUint32(le.AppendUint32(index, uint32(len(fields))), uint32(len(b)))
		fields = append(fields, b...)
	}
	headers := 0
	for _, r := range records {
		topic := len(topics)
		for i, t := range topics {
			if t == r.Topic {
				topic = i
			}
		}
		if topic == len(topics) {
			topics = append(topics, r.Topic)
		}
		index = le.AppendUint32(index, uint32(topic))
		index = le.AppendUint32(index, uint32(r.Partition))
		index = le.AppendUint32(index, 0)
		place(r.Key)
		place(r.Value)
		index = le.AppendUint32(index, uint32(headers))
		index = le.AppendUint32(index, uint32(len(r.Headers)))
		index = le.AppendUint64(index, uint64(r.Offset))
		index = le.AppendUint64(index, uint64(r.Timestamp.UnixMilli()))
		for _, h := range r.Headers {
			headerWords = le.AppendUint32(headerWords, uint32(len(headerKeys)))
			headerWords = le.AppendUint32(headerWords, uint32(len(h.Key)))
			headerKeys = append(headerKeys, h.Key...)
			if h.Value == nil {
				headerWords = le.AppendUint32(le.AppendUint32(headerWords, 0), nullLength)
			} else {
				headerWords = le.AppendUint32(le.AppendUint32(headerWords, uint32(len(fields))), uint32(len(h.Value)))
				fields = append(fields, h.Value...)
			}
		}
		headers += len(r.Headers)
	}
	data := le.AppendUint32(nil, uint32(len(topics)))
	for _, t := range topics {
		data = le.AppendUint16(data, uint16(len(t)))
		data = append(data, t...)
	}
	data = le.AppendUint32(data, uint32(len(headerKeys)))
	data = append(data, headerKeys...)
	data = le.AppendUint32(data, uint32(len(records)))
	data = append(data, index...)
	data = le.AppendUint32(data, uint32(headers))
	data = append(data, headerWords...)
	return completion{kind: 3 /* WEIR_KIND_RECORDS */, data: data, ranges: [][]byte{fields}}
}

func TestConsumedRecordsReadBackFromTheirRanges(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	want := []Record{
		{Topic: "t", Partition: 3, Offset: 1 << 60, Timestamp: at, Value: []byte("v"),
			Headers: []Header{{Key: "h", Value: nil}, {Key: "é", Value: []byte("x")}}},
		{Topic: "other", Partition: 0, Offset: 7, Timestamp: time.UnixMilli(-5), Key: []byte{}},
		{Topic: "t", Partition: 1, Offset: 8, Timestamp: at, Key: []byte("k"), Value: []byte("value")},
	}
	c := consumedCompletion(want)
	got, err := decodeViews(c.data, c.ranges)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(*got[i], want[i]) {
			t.Errorf("record %d: %+v, want %+v", i, *got[i], want[i])
		}
	}
	if got[0].Key != nil || got[1].Key == nil || got[1].Value != nil {
		t.Error("null and empty fields are told apart")
	}
	// A field is capped: appending to it cannot overwrite its neighbour.
	_ = append(got[2].Key, 'X')
	if !bytes.Equal(got[2].Value, []byte("value")) {
		t.Errorf("an append to a key wrote into the value: %q", got[2].Value)
	}
}

func TestMalformedViewsAreRefused(t *testing.T) {
	good := consumedCompletion([]Record{{Topic: "t", Key: []byte("k"), Value: []byte("v"),
		Headers: []Header{{Key: "h", Value: []byte("x")}}}})
	for cut := 0; cut < len(good.data); cut++ {
		if _, err := decodeViews(good.data[:cut], good.ranges); err == nil {
			t.Fatalf("a layout cut at %d of %d bytes was accepted", cut, len(good.data))
		}
	}
	if _, err := decodeViews(append(bytes.Clone(good.data), 0), good.ranges); err == nil {
		t.Error("trailing bytes were accepted")
	}
	if _, err := decodeViews(good.data, [][]byte{good.ranges[0][:1]}); err == nil {
		t.Error("a field past the end of its range was accepted")
	}
	if _, err := decodeViews(good.data, nil); err == nil {
		t.Error("a record naming a range that is not there was accepted")
	}
}
