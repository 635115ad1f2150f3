package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// UsageError is a mistake on the command line (exit 2): what is wrong
// and, when known, the command it was made in and that command's synopsis.
type UsageError struct {
	Msg, Command, Synopsis string
}

func (e *UsageError) Error() string { return e.Msg }

// Is makes every usage error an ErrUsage.
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

// Usagef returns a usage error of no particular command.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ErrUsage is a mistake on the command line already explained on stderr;
// every *UsageError is one too.
var ErrUsage = errors.New("usage")

// ErrHelp says that --help was asked for and the help printed.
var ErrHelp = errors.New("help printed")

// NewFlagSet returns a flag set that prints nothing itself: ParseArgs
// prints the help to stdout, once, or the command prints the error to
// stderr.
func NewFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// ParseArgs parses a command's flags. -h or --help prints the synopsis,
// the summary and every flag to stdout and returns ErrHelp (exit 0); a bad
// flag or a stray argument returns a usage error naming it (exit 2).
func ParseArgs(fs *flag.FlagSet, args []string, synopsis, summary string, stdout io.Writer) error {
	if err := ParseFlags(fs, args, synopsis, summary, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &UsageError{Msg: fmt.Sprintf("%s: unexpected argument %q", commandName(fs), fs.Arg(0)),
			Command: fs.Name(), Synopsis: synopsis}
	}
	return nil
}

// ParseFlags is ParseArgs for a command that takes arguments after its
// flags (fs.Args()).
func ParseFlags(fs *flag.FlagSet, args []string, synopsis, summary string, stdout io.Writer) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "usage: %s\n\n%s\n", synopsis, summary)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(stdout, "\nflags:\n")
			PrintFlags(stdout, fs)
		}
		return ErrHelp
	case err != nil:
		return &UsageError{Msg: commandName(fs) + ": " + err.Error(), Command: fs.Name(), Synopsis: synopsis}
	}
	return nil
}

// commandName is the flag set's name without the program: "bench http"
// for "tandem bench http".
func commandName(fs *flag.FlagSet) string {
	return strings.TrimPrefix(fs.Name(), "tandem ")
}
