package main

import (
	"io"
	"regexp"
)

// Colour on a terminal only: the words an operator scans a table for (a
// kill switch engaged, a failing gate, an abort that would trip) in red,
// passing ones in green, inconclusive ones in yellow. NO_COLOR
// (no-color.org), TERM=dumb, --json and any output that is not a terminal
// get plain text. The colour is added to each line as it is written, once
// the table's columns are laid out, so alignment is kept.

const (
	ansiRed    = "\033[31m"
	ansiGreen  = "\033[32m"
	ansiYellow = "\033[33m"
	ansiReset  = "\033[0m"
)

// colourWords are the words coloured, each a whole word.
var colourWords = regexp.MustCompile(`\b(ENGAGED|FAIL|TRIPS|fail|not clean|pass|clean|inconclusive)\b`)

func colourOf(word string) string {
	switch word {
	case "pass", "clean":
		return ansiGreen
	case "inconclusive":
		return ansiYellow
	}
	return ansiRed
}

// colour returns s with its status words coloured.
func colour(s string) string {
	return colourWords.ReplaceAllStringFunc(s, func(w string) string { return colourOf(w) + w + ansiReset })
}

// colourWriter colours what it writes to a terminal.
type colourWriter struct{ w io.Writer }

func (c *colourWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(c.w, colour(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// useColour reports whether output to w is coloured: w is a terminal and
// neither NO_COLOR (any value) nor TERM=dumb says otherwise.
func useColour(w io.Writer, env func(string) string) bool {
	if env("NO_COLOR") != "" || env("TERM") == "dumb" {
		return false
	}
	return isTerminal(w)
}
