package weir

import (
	"encoding/json"
	"time"
)

// Header is a record header; a nil Value is a null header value.
type Header struct {
	Key   string
	Value []byte
}

// Record is a record to produce or one consumed.
//
// Producing: Topic, Key, Value and Headers are sent; a nil Key or Value is
// null (a nil Key spreads records over partitions; a nil Value is a
// tombstone). Partition is used only with ProducerConfig.ManualPartitions
// (otherwise the topic's partitioner decides: its plugin, else murmur2 of the
// key). A zero Timestamp means now.
//
// Consumed: every field is set; Key, Value and header values may share one
// buffer with the other records of their batch (copy them to keep a small
// part of a large batch alive without the rest).
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
}

// RecordMetadata is where a produced record landed.
type RecordMetadata struct {
	Topic     string
	Partition int32
	// Offset is -1 with AcksNone.
	Offset    int64
	Timestamp time.Time
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// UnmarshalJSON reads the client core's [topic, partition] pairs.
func (tp *TopicPartition) UnmarshalJSON(data []byte) error {
	var pair [2]json.RawMessage
	if err := json.Unmarshal(data, &pair); err != nil {
		return err
	}
	if err := json.Unmarshal(pair[0], &tp.Topic); err != nil {
		return err
	}
	return json.Unmarshal(pair[1], &tp.Partition)
}

// TopicPartitionOffset is an offset of a partition: for commits, the next
// offset to read.
type TopicPartitionOffset struct {
	Topic     string
	Partition int32
	Offset    int64
}
