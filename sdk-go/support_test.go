package weir

// A real `weir serve` per test binary (WEIR_BIN, default ../target/debug/weir),
// reached over the network like any user's.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// deadline is generous: the test machine may be busy.
const deadline = 2 * time.Minute

var broker struct {
	address string
	dir     string
	cmd     *exec.Cmd
}

func weirBin() string {
	if bin := os.Getenv("WEIR_BIN"); bin != "" {
		return bin
	}
	abs, _ := filepath.Abs("../target/debug/weir")
	return abs
}

func pluginDir() string {
	if dir := os.Getenv("WEIR_PLUGIN_DIR"); dir != "" {
		return dir
	}
	abs, _ := filepath.Abs("../target/plugins/wasm32-wasip2/release")
	return abs
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startBroker starts `weir serve` in dir and waits until it answers.
func startBroker(dir string) (*exec.Cmd, string, error) {
	config := filepath.Join(dir, "weir.toml")
	if err := os.WriteFile(config, []byte("[plugins]\ncall_deadline_ms = 2000\n"), 0o644); err != nil {
		return nil, "", err
	}
	address, err := freePort()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(weirBin(), "serve", "--data-dir", filepath.Join(dir, "data"), "--listen", address, "--config", config)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	c, err := NewClient(Config{Brokers: []string{address}})
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for {
		select {
		case <-exited:
			return nil, "", fmt.Errorf("the broker exited")
		default:
		}
		if _, err := c.Admin().ListTopics(ctx); err == nil {
			return cmd, address, nil
		}
		if ctx.Err() != nil {
			_ = cmd.Process.Kill()
			return nil, "", fmt.Errorf("the broker at %s did not answer", address)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(memberEnv) != "" {
		os.Exit(groupMember())
	}
	dir, err := os.MkdirTemp("", "weir-go-")
	if err != nil {
		panic(err)
	}
	cmd, address, err := startBroker(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the broker:", err)
		os.Exit(1)
	}
	broker.address, broker.dir, broker.cmd = address, dir, cmd
	code := m.Run()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_, _ = cmd.Process.Wait()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// newClient is a client of the test broker, closed when t ends.
func newClient(t *testing.T) *Client {
	t.Helper()
	c, err := NewClient(Config{Brokers: []string{broker.address}, ClientID: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// createTopic makes a fresh topic named after the test.
func createTopic(t *testing.T, c *Client, name string, partitions int32) string {
	t.Helper()
	if err := c.Admin().CreateTopics(testContext(t), NewTopic{Name: name, Partitions: partitions}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return name
}

// pollN polls until n records arrived.
func pollN(t *testing.T, ctx context.Context, cons *Consumer, n int) []*Record {
	t.Helper()
	var out []*Record
	for len(out) < n {
		batch, err := cons.PollBatch(ctx, n-len(out))
		if err != nil {
			t.Fatalf("poll after %d of %d records: %v", len(out), n, err)
		}
		out = append(out, batch...)
	}
	return out
}
