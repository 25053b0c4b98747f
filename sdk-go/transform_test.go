package weir

// A transform deployed from Go with a dead-letter topic: the record its
// plugin fails on goes there unchanged, the rest to the output, and the
// status counts both.

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// readTopic reads n records of a one-partition topic from its beginning.
func readTopic(t *testing.T, c *Client, topic string, n int) []*Record {
	t.Helper()
	ctx := testContext(t)
	cons, err := c.NewConsumer(ConsumerConfig{AutoOffsetReset: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := cons.Assign(ctx, TopicPartition{topic, 0}); err != nil {
		t.Fatal(err)
	}
	return pollN(t, ctx, cons, n)
}

func TestATransformSendsWhatItsPluginFailsOnToItsDeadLetterTopic(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	raw := createTopic(t, c, "go-dl-raw", 1)
	clean := createTopic(t, c, "go-dl-clean", 1)
	letters := createTopic(t, c, "go-dl-letters", 1)
	wasm, err := os.ReadFile(filepath.Join(pluginDir(), "identity_transform.wasm"))
	if err != nil {
		t.Fatalf("%v (run scripts/build-plugins.sh)", err)
	}
	uploaded, err := c.Admin().UploadPlugin(ctx, "go-picky", "transform", wasm)
	if err != nil || (uploaded.State != "compiling" && uploaded.State != "ready") {
		t.Fatalf("upload: %+v, %v", uploaded, err)
	}
	p, err := c.NewProducer(ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, value := range []string{"ok-1", "bad", "ok-2"} {
		if _, err := p.ProduceSync(ctx, Record{Topic: raw, Value: []byte(value)}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	err = c.Admin().DeployTransform(ctx, Transform{
		Name: "go-picky", Plugin: "go-picky", InputTopic: raw, OutputTopics: []string{clean},
		Start: TransformEarliest, Config: map[string]string{"fail_on": "bad"}, DeadLetterTopic: letters,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := readTopic(t, c, clean, 2); string(got[0].Value) != "ok-1" || string(got[1].Value) != "ok-2" {
		t.Fatalf("outputs %q, %q", got[0].Value, got[1].Value)
	}
	letter := readTopic(t, c, letters, 1)[0]
	offset := ""
	for _, header := range letter.Headers {
		if header.Key == "weir.dlq.offset" {
			offset = string(header.Value)
		}
	}
	if string(letter.Value) != "bad" || offset != "1" {
		t.Fatalf("dead letter %q from offset %q", letter.Value, offset)
	}
	// The counters reach the status once the partition's checkpoint is read.
	var status TransformStatus
	for status.Name == "" || status.Partitions[0].DeadLettered != 1 {
		transforms, err := c.Admin().ListTransforms(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, transform := range transforms {
			if transform.Name == "go-picky" {
				status = transform
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the dead letter was never counted: %+v", status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	partition := status.Partitions[0]
	if status.DeadLetterTopic != letters || partition.Processed != 3 || partition.Emitted != 2 {
		t.Fatalf("status %+v", status)
	}
	if err := c.Admin().DeleteTransform(ctx, "go-picky"); err != nil {
		t.Fatal(err)
	}
}
