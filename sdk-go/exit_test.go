package weir

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// 200 short-lived programs (WEIR_GO_EXIT_RUNS to change) that return from main
// with clients open and calls in flight: each exits 0 and prints its line.
func TestShortLivedProgramsExitCleanlyWithClientsOpen(t *testing.T) {
	runs := 200
	if text := os.Getenv("WEIR_GO_EXIT_RUNS"); text != "" {
		runs, _ = strconv.Atoi(text)
	}
	c := newClient(t)
	topic := createTopic(t, c, "go-exit", 1)
	probe := filepath.Join(t.TempDir(), "exitprobe")
	build := exec.Command("go", "build", "-o", probe, "./internal/exitprobe")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, out)
	}
	for i := 0; i < runs; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		out, err := exec.CommandContext(ctx, probe, broker.address, topic).CombinedOutput()
		cancel()
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			t.Fatalf("run %d of %d: %v\n%s", i+1, runs, err, out)
		}
	}
}

// The quickstart example runs against a real broker as its doc says.
func TestQuickstartExampleRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "run", "./examples/quickstart", "-brokers", broker.address, "-topic", "go-quickstart").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Count(string(out), "sent to go-quickstart/") != 3 || strings.Count(string(out), "read go-quickstart/") != 3 {
		t.Fatalf("unexpected output:\n%s", out)
	}
}
