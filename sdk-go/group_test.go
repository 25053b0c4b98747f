package weir

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// memberEnv makes the test binary a group member process (see groupMember).
const memberEnv = "WEIR_GO_GROUP_MEMBER"

// groupMember is one member of a consumer group in its own process: it
// prints its assignment changes and every record it handles, commits after
// each batch, and leaves the group when its stdin closes.
func groupMember() int {
	spec := strings.Split(os.Getenv(memberEnv), ",") // address,topic,group
	c, err := NewClient(Config{Brokers: []string{spec[0]}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	report := func(kind string) func([]TopicPartition) {
		return func(partitions []TopicPartition) { say("%s %d", kind, len(partitions)) }
	}
	cons, err := c.NewConsumer(ConsumerConfig{
		GroupID:           spec[2],
		AutoOffsetReset:   "earliest",
		DisableAutoCommit: true,
		OnAssigned:        report("assigned"),
		OnRevoked:         report("revoked"),
	})
	if err != nil {
		say("error %v", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := cons.Subscribe(ctx, spec[1]); err != nil {
		say("error %v", err)
		return 1
	}
	for ctx.Err() == nil {
		batch, err := cons.PollBatch(ctx, 50)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			say("error %v", err)
			return 1
		}
		for _, r := range batch {
			say("record %s", r.Value)
		}
		// Not ctx: a commit runs to its end even once the parent says stop.
		if err := cons.Commit(context.Background()); err != nil {
			say("commit-error %v", err)
		}
	}
	if err := c.Close(); err != nil {
		say("error %v", err)
		return 1
	}
	say("closed")
	return 0
}

type member struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func TestGroupSplitAcrossTwoProcesses(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	topic := createTopic(t, c, "go-group", 4)
	const n = 200

	type line struct {
		member int
		text   string
	}
	lines := make(chan line, 1024)
	start := func(index int) *member {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%s", memberEnv, broker.address, topic, "go-group-members"))
		cmd.Stderr = os.Stderr
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			scanner := bufio.NewScanner(stdout)
			for scanner.Scan() {
				lines <- line{index, scanner.Text()}
			}
		}()
		return &member{cmd, stdin}
	}
	owned := map[int]int{}
	rebalances := map[int][]string{}
	seen := map[string]map[int]bool{}
	closed := map[int]bool{}
	next := func() line {
		select {
		case l := <-lines:
			if strings.HasPrefix(l.text, "error") {
				t.Fatalf("member %d: %s", l.member, l.text)
			}
			var count int
			if _, err := fmt.Sscanf(l.text, "assigned %d", &count); err == nil {
				owned[l.member] += count
				rebalances[l.member] = append(rebalances[l.member], l.text)
			} else if _, err := fmt.Sscanf(l.text, "revoked %d", &count); err == nil {
				owned[l.member] -= count
				rebalances[l.member] = append(rebalances[l.member], l.text)
			} else if value, ok := strings.CutPrefix(l.text, "record "); ok {
				if seen[value] == nil {
					seen[value] = map[int]bool{}
				}
				seen[value][l.member] = true
			} else if l.text == "closed" {
				closed[l.member] = true
			}
			return l
		case <-ctx.Done():
			t.Fatalf("timed out: owned %v, %d of %d records seen, rebalances %v", owned, len(seen), n, rebalances)
			return line{}
		}
	}
	first := start(0)
	for owned[0] != 4 {
		next()
	}
	second := start(1)
	for !(owned[0] > 0 && owned[1] > 0 && owned[0]+owned[1] == 4) {
		next()
	}
	// Records go in once the work is split, so both members have some.
	p, err := c.NewProducer(ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var records []Record
	for i := 0; i < n; i++ {
		records = append(records, Record{Topic: topic, Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint(i))})
	}
	if _, err := p.ProduceSync(ctx, records...); err != nil {
		t.Fatal(err)
	}
	for len(seen) < n {
		next()
	}
	byMember := map[int]int{}
	for _, members := range seen {
		for m := range members {
			byMember[m]++
		}
	}
	if byMember[0] == 0 || byMember[1] == 0 {
		t.Fatalf("records by member %v: the group did not split the work", byMember)
	}
	if len(rebalances[0]) < 2 {
		t.Fatalf("member 0 saw %v: no revocation when member 1 joined", rebalances[0])
	}
	for _, m := range []*member{first, second} {
		_ = m.stdin.Close()
	}
	for !closed[0] || !closed[1] {
		next()
	}
	for i, m := range []*member{first, second} {
		if err := m.cmd.Wait(); err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	lags, err := c.Admin().GroupLag(ctx, "go-group-members")
	if err != nil {
		t.Fatal(err)
	}
	for _, lag := range lags {
		if lag.Lag == nil || *lag.Lag != 0 {
			t.Fatalf("lag after both members committed everything: %+v", lag)
		}
	}
}
