// Package bench measures the Go SDK: produce and consume throughput next to
// the Rust client on the same Weir broker, and next to franz-go against the
// Kafka peer, in one run. A benchmark, not a test; its own module so the SDK
// does not depend on franz-go. Run through scripts/bench-go.sh, which builds
// the release binaries and library and fetches the peers, then:
//
//	go test -run '^$' -bench . -benchtime 200000x -count 3
//
// TestMain starts `weir-bench serve` (a Weir broker and a single-node Kafka
// pinned to the lower half of the CPUs) and pins this process to the upper
// half; after the benchmarks it prints the ratios of the medians. Each
// measured workload starts on a collected heap, and the Go consumer's clock
// starts after Assign, as `weir bench consume`'s does after its assign and seek.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	weir "github.com/weir-streaming/weir/sdk-go"
	"golang.org/x/sys/unix"
)

const recordBytes = 1024

var servers struct {
	Weir               string `json:"weir"`
	Kafka              string `json:"kafka"`
	LoadGeneratorCPUs  []int  `json:"load_generator_cpus"`
	weirBin, weirBench string
	client             *weir.Client
	kafkaAdmin         *kadm.Client
}

var results = struct {
	sync.Mutex
	mbps map[string][]float64
	cpu  map[string][]float64
}{mbps: map[string][]float64{}, cpu: map[string][]float64{}}

// minRecords is the shortest run recorded: go test's calibration run with
// b.N = 1 measures nothing.
const minRecords = 10_000

func record(name string, records int, seconds, cpuSeconds float64) {
	if records < minRecords {
		return
	}
	bytes := int64(records) * recordBytes
	results.Lock()
	defer results.Unlock()
	results.mbps[name] = append(results.mbps[name], float64(bytes)/seconds/1e6)
	results.cpu[name] = append(results.cpu[name], cpuSeconds*1e9/float64(bytes)) // CPU-seconds per GB
}

func recordRust(name string, records int, mbps, cpuSeconds float64) {
	if records < minRecords {
		return
	}
	results.Lock()
	defer results.Unlock()
	results.mbps[name] = append(results.mbps[name], mbps)
	results.cpu[name] = append(results.cpu[name], cpuSeconds*1e9/float64(int64(records)*recordBytes))
}

func root() string {
	abs, _ := filepath.Abs("../..")
	return abs
}

func TestMain(m *testing.M) {
	servers.weirBin = envOr("WEIR_BIN", filepath.Join(root(), "target/release/weir"))
	servers.weirBench = envOr("WEIR_BENCH_BIN", filepath.Join(root(), "target/release/weir-bench"))
	serve := exec.Command(servers.weirBench, "serve", "--systems", "weir,kafka", "--weir-bin", servers.weirBin)
	serve.Stderr = os.Stderr
	stdin, _ := serve.StdinPipe()
	stdout, _ := serve.StdoutPipe()
	if err := serve.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start weir-bench serve:", err)
		os.Exit(1)
	}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &servers)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "weir-bench serve did not report its servers:", err)
		os.Exit(1)
	}
	if len(servers.LoadGeneratorCPUs) > 0 {
		pin(servers.LoadGeneratorCPUs)
	}
	code := func() int {
		c, err := weir.NewClient(weir.Config{Brokers: []string{servers.Weir}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer c.Close()
		servers.client = c
		kc, err := kgo.NewClient(kgo.SeedBrokers(servers.Kafka))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer kc.Close()
		servers.kafkaAdmin = kadm.NewClient(kc)
		code := m.Run()
		summarize()
		return code
	}()
	_ = stdin.Close()
	_ = serve.Wait()
	os.Exit(code)
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// pin moves every thread of this process (and so every later one: the Go
// runtime's, the Rust runtime's) onto cpus, and sizes GOMAXPROCS to them as
// Go does for a program started on those CPUs (taskset): left at the
// machine's count, idle Ps spin for work on CPUs the Rust threads need
// (measured: a Go consumer pinned to one CPU with GOMAXPROCS=2 spent 2.3
// CPU-seconds per GB instead of 1.1).
func pin(cpus []int) {
	runtime.GOMAXPROCS(len(cpus))
	var set unix.CPUSet
	for _, cpu := range cpus {
		set.Set(cpu)
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		_ = unix.SchedSetaffinity(tid, &set)
	}
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &usage)
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

var topicSeq int

// freshTopics makes a one-partition page-cache topic on Weir and on Kafka.
func freshTopics(b *testing.B, prefix string) (weirTopic, kafkaTopic string) {
	topicSeq++
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), topicSeq)
	ctx := context.Background()
	err := servers.client.Admin().CreateTopics(ctx, weir.NewTopic{Name: name, Partitions: 1, Configs: map[string]string{"flush.policy": "interval"}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := servers.kafkaAdmin.CreateTopic(ctx, 1, 1, nil, name); err != nil {
		b.Fatal(err)
	}
	return name, name
}

var value = make([]byte, recordBytes)

// produceGo sends n records through the Go SDK in batches of 500, every batch
// in flight at once, as a Go user with ProduceSync per batch would.
func produceGo(b *testing.B, topic string, n int) {
	p, err := servers.client.NewProducer(weir.ProducerConfig{Acks: weir.AcksLeader, Idempotent: weir.Bool(false)})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	const batch = 500
	for sent := 0; sent < n; sent += batch {
		records := make([]weir.Record, min(batch, n-sent))
		for i := range records {
			records[i] = weir.Record{Topic: topic, Value: value}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.ProduceSync(ctx, records...); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

func produceFranz(b *testing.B, topic string, n int) {
	kc, err := kgo.NewClient(kgo.SeedBrokers(servers.Kafka), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.DefaultProduceTopic(topic))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed error
	var mu sync.Mutex
	wg.Add(n)
	for i := 0; i < n; i++ {
		kc.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
}

func consumeGo(b *testing.B, topic string, n int, begin func()) int64 {
	cons, err := servers.client.NewConsumer(weir.ConsumerConfig{AutoOffsetReset: "earliest"})
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	ctx := context.Background()
	if err := cons.Assign(ctx, weir.TopicPartition{Topic: topic, Partition: 0}); err != nil {
		b.Fatal(err)
	}
	begin()
	var bytes int64
	for count := 0; count < n; {
		batch, err := cons.PollBatch(ctx, 0)
		if err != nil {
			b.Fatal(err)
		}
		count += len(batch)
		for _, r := range batch {
			bytes += int64(len(r.Value))
		}
	}
	return bytes
}

func consumeFranz(b *testing.B, topic string, n int) int64 {
	kc, err := kgo.NewClient(kgo.SeedBrokers(servers.Kafka), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	ctx := context.Background()
	var bytes int64
	for count := 0; count < n; {
		fetches := kc.PollFetches(ctx)
		if errs := fetches.Errors(); len(errs) > 0 {
			b.Fatal(errs[0].Err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			count++
			bytes += int64(len(r.Value))
		})
	}
	return bytes
}

// rustBench runs `weir bench WORKLOAD` (the Rust client): its MB/s and the
// CPU seconds of its process.
func rustBench(b *testing.B, workload, topic string, extra ...string) (float64, float64) {
	args := append([]string{"bench", workload, "--topic", topic, "--loopback-bytes", "0", "--format", "json", "--brokers", servers.Weir}, extra...)
	out, err := exec.Command(servers.weirBin, args...).Output()
	if err != nil {
		b.Fatalf("weir bench %s: %v", workload, err)
	}
	var report struct {
		MBPerSecond float64 `json:"mb_per_second"`
		CPUSeconds  float64 `json:"cpu_seconds"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		b.Fatal(err)
	}
	return report.MBPerSecond, report.CPUSeconds
}

// measure runs work once with the timer on and records its throughput.
// measure times work on a collected heap (so it does not pay for the garbage
// of what ran before it; each Rust run starts in a fresh process). work may
// call begin once its setup is done to start the clock there, as `weir bench
// consume` starts its clock after assigning and seeking.
func measure(b *testing.B, name string, work func(begin func())) {
	b.SetBytes(recordBytes)
	runtime.GC()
	cpu := cpuSeconds()
	b.ResetTimer()
	started := time.Now()
	begin := func() {
		cpu = cpuSeconds()
		b.ResetTimer()
		started = time.Now()
	}
	work(begin)
	seconds := time.Since(started).Seconds()
	b.StopTimer()
	record(name, b.N, seconds, cpuSeconds()-cpu)
}

func BenchmarkProduce(b *testing.B) {
	b.Run("go-sdk-weir", func(b *testing.B) {
		topic, _ := freshTopics(b, "go-produce")
		measure(b, "produce go-sdk-weir", func(func()) { produceGo(b, topic, b.N) })
	})
	b.Run("rust-client-weir", func(b *testing.B) {
		topic, _ := freshTopics(b, "rust-produce")
		b.SetBytes(recordBytes)
		mbps, cpu := rustBench(b, "produce", topic, "--records", strconv.Itoa(b.N), "--acks", "1")
		recordRust("produce rust-client-weir", b.N, mbps, cpu)
	})
	b.Run("franz-go-kafka", func(b *testing.B) {
		_, topic := freshTopics(b, "franz-produce")
		measure(b, "produce franz-go-kafka", func(func()) { produceFranz(b, topic, b.N) })
	})
}

func BenchmarkConsume(b *testing.B) {
	b.Run("go-sdk-weir", func(b *testing.B) {
		topic, _ := freshTopics(b, "go-consume")
		b.StopTimer()
		produceGo(b, topic, b.N)
		measure(b, "consume go-sdk-weir", func(begin func()) { consumeGo(b, topic, b.N, begin) })
	})
	b.Run("rust-client-weir", func(b *testing.B) {
		topic, _ := freshTopics(b, "rust-consume")
		b.StopTimer()
		produceGo(b, topic, b.N)
		b.SetBytes(recordBytes)
		mbps, cpu := rustBench(b, "consume", topic)
		recordRust("consume rust-client-weir", b.N, mbps, cpu)
	})
	b.Run("franz-go-kafka", func(b *testing.B) {
		_, topic := freshTopics(b, "franz-consume")
		b.StopTimer()
		produceFranz(b, topic, b.N)
		measure(b, "consume franz-go-kafka", func(func()) { consumeFranz(b, topic, b.N) })
	})
}

func median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	sorted := append([]float64(nil), values...)
	sort.Float64s(sorted)
	if len(sorted)%2 == 1 {
		return sorted[len(sorted)/2]
	}
	return (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
}

// summarize prints the medians and the ratios the issue asks for.
func summarize() {
	results.Lock()
	defer results.Unlock()
	if len(results.mbps) == 0 {
		return
	}
	fmt.Println("\nmedians (MB/s; client CPU-seconds per GB):")
	names := make([]string, 0, len(results.mbps))
	for name := range results.mbps {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Printf("  %-28s %8.1f MB/s  %6.2f cpu-s/GB  (runs %v)\n", name, median(results.mbps[name]), median(results.cpu[name]), results.mbps[name])
	}
	ratio := func(a, b string) {
		if median(results.mbps[b]) > 0 {
			fmt.Printf("  %s / %s: %.2f (throughput), %.2f (their CPU per GB / ours)\n", a, b,
				median(results.mbps[a])/median(results.mbps[b]), median(results.cpu[b])/median(results.cpu[a]))
		}
	}
	fmt.Println("ratios:")
	for _, workload := range []string{"produce", "consume"} {
		ratio(workload+" go-sdk-weir", workload+" rust-client-weir")
		ratio(workload+" go-sdk-weir", workload+" franz-go-kafka")
	}
}
