package server

import (
	"os/exec"
	"strings"
	"testing"
)

// notInTheServer are packages the server must not link: the bench, its
// fault proxy and load generator, the demo and its embedded Redis, and
// what only tests use. `tandem bench` (cmd/tandem/internal/benchcmd) and
// the demo (cmd/tandem/internal/demo) import the server, never the other
// way round.
//
// internal/scratch is not among them: a rollout plan's rehearsal replays
// a capture on a scratch database (rehearse.go, internal/replay), which the
// server creates and drops with it.
var notInTheServer = []string{
	"github.com/tandemhq/tandem/cmd/tandem/internal/benchcmd",
	"github.com/tandemhq/tandem/cmd/tandem/internal/demo",
	"github.com/alicebob/miniredis/v2",
	"github.com/tandemhq/tandem/internal/bench",
	"github.com/tandemhq/tandem/internal/faultproxy",
	"github.com/tandemhq/tandem/internal/loadgen",
	"github.com/tandemhq/tandem/internal/testenv",
	"github.com/tandemhq/tandem/internal/rediscluster",
}

// TestServerDependencies lists what this package links (go list -deps,
// tests excluded) and fails on any of notInTheServer.
func TestServerDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	if !deps["github.com/tandemhq/tandem/cmd/tandem/internal/server"] {
		t.Fatalf("got no server package in the list, want it last:\n%s", out)
	}
	for _, p := range notInTheServer {
		if deps[p] {
			t.Errorf("got %s among the server's dependencies, want it out of `tandem serve`", p)
		}
	}
}
