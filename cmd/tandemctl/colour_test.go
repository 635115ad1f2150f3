package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestColour: status words are coloured as whole words, and the rest of a
// line (its column padding) is left as it is.
func TestColour(t *testing.T) {
	var b bytes.Buffer
	w := &colourWriter{w: &b}
	w.Write([]byte("pod-b  ENGAGED  fail: min_comparisons  passing\n"))
	got := b.String()
	if !strings.Contains(got, ansiRed+"ENGAGED"+ansiReset+"  ") || !strings.Contains(got, ansiRed+"fail"+ansiReset+": min_comparisons") {
		t.Errorf("got %q, want ENGAGED and fail in red, padding kept", got)
	}
	if strings.Contains(got, ansiGreen) {
		t.Errorf("got %q, want 'passing' left alone (not the word pass)", got)
	}
}

// TestUseColour: never without a terminal; NO_COLOR and TERM=dumb turn it
// off on one.
func TestUseColour(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if useColour(&bytes.Buffer{}, env(nil)) {
		t.Error("got colour for a buffer, want none")
	}
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		t.Logf("no terminal here (%v): only the non-terminal case is checked", err)
		return
	}
	defer tty.Close()
	if !useColour(tty, env(nil)) || useColour(tty, env(map[string]string{"NO_COLOR": "1"})) || useColour(tty, env(map[string]string{"TERM": "dumb"})) {
		t.Error("on a terminal: want colour, none with NO_COLOR, none with TERM=dumb")
	}
}
