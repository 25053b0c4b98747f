package weir

// The conformance suite every SDK runs (conformance/vectors.json, written
// from the Rust client core by client/tests/conformance.rs).

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

type hexBytes []byte

func (h *hexBytes) UnmarshalJSON(data []byte) error {
	var text *string
	if err := json.Unmarshal(data, &text); err != nil {
		return err
	}
	if text == nil {
		*h = nil
		return nil
	}
	decoded, err := hex.DecodeString(*text)
	if decoded == nil {
		decoded = []byte{}
	}
	*h = decoded
	return err
}

type vectors struct {
	Errors []struct {
		Code      uint16 `json:"code"`
		Name      string `json:"name"`
		Retriable bool   `json:"retriable"`
	} `json:"errors"`
	Murmur2      []keyVector `json:"murmur2"`
	KafkaMurmur2 []keyVector `json:"kafka_murmur2"`
	Partitioner  struct {
		Plugin     string            `json:"plugin"`
		Topic      string            `json:"topic"`
		Partitions int32             `json:"partitions"`
		Config     map[string]string `json:"config"`
		Placements []struct {
			Key       string `json:"key"`
			Partition int32  `json:"partition"`
		} `json:"placements"`
	} `json:"partitioner"`
	RoundTrip struct {
		Topic      string `json:"topic"`
		Partitions int32  `json:"partitions"`
		Records    []struct {
			Key               hexBytes      `json:"key"`
			Value             hexBytes      `json:"value"`
			Headers           [][2]hexOrKey `json:"headers"`
			Partition         *int32        `json:"partition"`
			ExpectedPartition int32         `json:"expected_partition"`
		} `json:"records"`
	} `json:"round_trip"`
}

type keyVector struct {
	Key        hexBytes `json:"key"`
	Partitions int32    `json:"partitions"`
	Partition  int32    `json:"partition"`
}

// hexOrKey is a header pair's element: the key as text, the value as hex.
type hexOrKey struct {
	text  string
	bytes hexBytes
}

func (h *hexOrKey) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, &h.text); err != nil {
		return err
	}
	_ = h.bytes.UnmarshalJSON(data) // a key is not hex: only its text is used
	return nil
}

func loadVectors(t *testing.T) vectors {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "conformance", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestConformanceKeysLandOnKafkaMurmur2Partitions(t *testing.T) {
	v := loadVectors(t)
	for _, vector := range append(v.Murmur2, v.KafkaMurmur2...) {
		if got := PartitionForKey(vector.Key, vector.Partitions); got != vector.Partition {
			t.Fatalf("key %x among %d: %d, want %d", []byte(vector.Key), vector.Partitions, got, vector.Partition)
		}
	}
}

func TestConformanceEveryErrorCodeWithItsRetriability(t *testing.T) {
	v := loadVectors(t)
	if len(v.Errors) != len(codeTable) {
		t.Fatalf("%d codes in the vectors, %d in errors_gen.go", len(v.Errors), len(codeTable))
	}
	for _, entry := range v.Errors {
		code := Code(entry.Code)
		if code.String() != entry.Name || code.Retriable() != entry.Retriable {
			t.Fatalf("code %d: %s retriable %v, want %s %v", entry.Code, code, code.Retriable(), entry.Name, entry.Retriable)
		}
		err := newError(entry.Code, "m")
		if !errors.Is(err, &Error{Code: code}) {
			t.Fatalf("code %d does not match its sentinel", entry.Code)
		}
	}
}

func TestConformanceRecordsRoundTrip(t *testing.T) {
	trip := loadVectors(t).RoundTrip
	c := newClient(t)
	ctx := testContext(t)
	createTopic(t, c, trip.Topic, trip.Partitions)
	byPartitioner, err := c.NewProducer(ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	manual, err := c.NewProducer(ProducerConfig{ManualPartitions: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range trip.Records {
		record := Record{Topic: trip.Topic, Key: want.Key, Value: want.Value}
		for _, h := range want.Headers {
			record.Headers = append(record.Headers, Header{Key: h[0].text, Value: h[1].bytes})
		}
		producer := byPartitioner
		if want.Partition != nil {
			producer, record.Partition = manual, *want.Partition
		}
		mds, err := producer.ProduceSync(ctx, record)
		if err != nil {
			t.Fatal(err)
		}
		if mds[0].Partition != want.ExpectedPartition {
			t.Fatalf("record %d on partition %d, want %d", i, mds[0].Partition, want.ExpectedPartition)
		}
	}
	cons, err := c.NewConsumer(ConsumerConfig{AutoOffsetReset: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	var partitions []TopicPartition
	for p := int32(0); p < trip.Partitions; p++ {
		partitions = append(partitions, TopicPartition{trip.Topic, p})
	}
	if err := cons.Assign(ctx, partitions...); err != nil {
		t.Fatal(err)
	}
	got := pollN(t, ctx, cons, len(trip.Records))
	sort.SliceStable(got, func(i, j int) bool {
		return got[i].Partition < got[j].Partition || got[i].Partition == got[j].Partition && got[i].Offset < got[j].Offset
	})
	want := append(trip.Records[:0:0], trip.Records...)
	sort.SliceStable(want, func(i, j int) bool { return want[i].ExpectedPartition < want[j].ExpectedPartition })
	for i := range want {
		g, w := got[i], want[i]
		if g.Partition != w.ExpectedPartition || !sameBytes(g.Key, w.Key) || !sameBytes(g.Value, w.Value) || len(g.Headers) != len(w.Headers) {
			t.Fatalf("record %d: got %+v, want %+v", i, g, w)
		}
		for h := range w.Headers {
			if g.Headers[h].Key != w.Headers[h][0].text || !sameBytes(g.Headers[h].Value, w.Headers[h][1].bytes) {
				t.Fatalf("record %d header %d: %+v", i, h, g.Headers[h])
			}
		}
	}
}

// sameBytes compares contents and null-ness.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func TestConformancePartitionerPluginPlacesRecordsAsFromRust(t *testing.T) {
	placed := loadVectors(t).Partitioner
	c := newClient(t)
	ctx := testContext(t)
	wasm, err := os.ReadFile(filepath.Join(pluginDir(), placed.Plugin+".wasm"))
	if err != nil {
		t.Fatalf("%v (run scripts/build-plugins.sh)", err)
	}
	if _, err := c.Admin().UploadPlugin(ctx, placed.Plugin, "partitioner", wasm); err != nil {
		t.Fatal(err)
	}
	createTopic(t, c, placed.Topic, placed.Partitions)
	if err := c.Admin().SetPartitioner(ctx, placed.Topic, placed.Plugin, placed.Config); err != nil {
		t.Fatal(err)
	}
	plugins, err := c.Admin().ListPlugins(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, plugin := range plugins {
		if plugin.Name == placed.Plugin && (plugin.State != "ready" || plugin.StateReason != "") {
			t.Fatalf("setting a partitioner waits for its compile: %+v", plugin)
		}
	}
	p, err := c.NewProducer(ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, placement := range placed.Placements {
		mds, err := p.ProduceSync(ctx, Record{Topic: placed.Topic, Key: []byte(placement.Key), Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		if mds[0].Partition != placement.Partition {
			t.Fatalf("key %q on partition %d, want %d", placement.Key, mds[0].Partition, placement.Partition)
		}
	}
	plugins, err = c.Admin().ListPlugins(ctx)
	if err != nil || len(plugins) == 0 || plugins[0].Name != placed.Plugin || len(plugins[0].AttachedTo) == 0 {
		t.Fatalf("plugins %+v %v", plugins, err)
	}
}
