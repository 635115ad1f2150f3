package benchcmd

import (
	"fmt"
	"io"
	"os"

	"github.com/tandemhq/tandem/internal/bench"
	"github.com/tandemhq/tandem/internal/cli"
)

const (
	benchReportSynopsis = "tandem bench report [--update FILE] RUN.json..."
	benchReportSummary  = `Reads the --json output of bench runs and renders markdown: issue 14's
figures, each computed from the cells with met or not met, then every
run's command line, load average and cells. --update replaces the section
of FILE between <!-- bench:begin --> and <!-- bench:end --> (BENCHMARKS.md)
and leaves the rest of the file as it is; without it the markdown goes to
stdout.`
)

// runReport is `tandem bench report`.
func runReport(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("tandem bench report")
	update := fs.String("update", "", "replace the generated section of this markdown `FILE` instead of printing")
	if err := cli.ParseFlags(fs, args, benchReportSynopsis, benchReportSummary, stdout); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return &cli.UsageError{Msg: "bench report: want the JSON files of the runs", Command: fs.Name(), Synopsis: benchReportSynopsis}
	}
	var runs []bench.ReportRun
	for _, path := range fs.Args() {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		r, err := bench.ParseRun(path, data)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	section := bench.Report(runs)
	if *update == "" {
		_, err := io.WriteString(stdout, section)
		return err
	}
	doc, err := os.ReadFile(*update)
	if err != nil {
		return err
	}
	out, err := bench.ReplaceSection(string(doc), section)
	if err != nil {
		return fmt.Errorf("bench report: %s: %w", *update, err)
	}
	return os.WriteFile(*update, []byte(out), 0o644)
}
