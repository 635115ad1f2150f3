package main_test

import (
	"strings"
	"testing"
)

// TestWatchFlags: report and plan take --watch like pods; --interval
// without --watch, and --watch with a plan action, are usage errors (exit
// 2) that send nothing.
func TestWatchFlags(t *testing.T) {
	api := newFakeAPI(t, 200, `{}`)
	for _, args := range [][]string{
		{"report", "--interval", "1s"},
		{"plan", "--interval", "1s"},
		{"plan", "pause", "--reason", "r", "--watch"},
		{"report", "--watch", "--interval", "0s"},
	} {
		code, _, stderr := run(t, envFor(api.URL), args...)
		if code != 2 || !strings.Contains(stderr, "--") {
			t.Errorf("%v: got exit %d stderr %q, want a usage error", args, code, stderr)
		}
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("got %d requests, want none for usage errors", n)
	}
}
