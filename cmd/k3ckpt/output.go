package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// jsonSchema is the version of every --json object's layout. It changes
// only when a field changes meaning or disappears; new fields keep it.
const jsonSchema = 1

// writeJSON writes v, which must encode as a JSON object, as one indented
// object on w with "schema" as its first field.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	body := bytes.TrimSpace(buf.Bytes()) // compact: "{}" when v has no fields
	if len(body) < 2 || body[0] != '{' {
		return fmt.Errorf("internal error: --json output is not an object")
	}
	sep := ","
	if body[1] == '}' {
		sep = ""
	}
	var out bytes.Buffer
	if err := json.Indent(&out, fmt.Appendf(nil, `{"schema":%d%s%s`, jsonSchema, sep, body[1:]), "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err := out.WriteTo(w)
	return err
}

// globalBool reads a global flag (-q, -v); false when the command runs
// outside the root (tests build single commands).
func globalBool(cmd *cobra.Command, name string) bool {
	f := cmd.Flag(name)
	return f != nil && f.Value.String() == "true"
}

func quiet(cmd *cobra.Command) bool   { return globalBool(cmd, "quiet") }
func verbose(cmd *cobra.Command) bool { return globalBool(cmd, "verbose") }

// summary is where a writing command prints its human-readable summary:
// stdout, or nothing under -q.
func summary(cmd *cobra.Command) io.Writer {
	if quiet(cmd) {
		return io.Discard
	}
	return wrapLines(cmd)
}

// wrapLines is stdout with every line longer than termWidth wrapped, its
// continuation lines indented: summaries fit the terminal as tables do.
func wrapLines(cmd *cobra.Command) io.Writer {
	return &lineWrapper{w: cmd.OutOrStdout(), width: termWidth(cmd)}
}

// lineWrapper wraps each complete (newline-ended) line written to it.
type lineWrapper struct {
	w       io.Writer
	width   int
	partial []byte
}

func (l *lineWrapper) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.partial[:i])
		if utf8.RuneCountInString(line) > l.width {
			line = termtext.Wrap(line, l.width, "  ")
		}
		if _, err := io.WriteString(l.w, line+"\n"); err != nil {
			return 0, err
		}
		l.partial = l.partial[i+1:]
	}
}

// newProgress is the progress display of a long command: on a terminal
// stderr, unless the output is JSON or -q is given (else nil).
func newProgress(cmd *cobra.Command, asJSON bool, label string, unit progressUnit) *progressBar {
	if asJSON || quiet(cmd) || !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	return &progressBar{w: os.Stderr, label: label, unit: unit, now: time.Now}
}

// jobsUsage is the one meaning of --jobs across commands.
const jobsUsage = "files read or written at once (0: one per CPU core, at least 2, at most 8)"

// addJobsFlag registers --jobs with its one meaning and default.
func addJobsFlag(fs *pflag.FlagSet, jobs *int) {
	fs.IntVar(jobs, "jobs", 0, jobsUsage)
}

// stateDirFlag registers --state-dir on a command that writes to, or
// finishes, a bucket DST.
func stateDirFlag(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "state-dir", "", "where the run records of an s3:// or gs:// DST live (plan, done records, locks; default: under the user's cache directory, named after DST); the workers of one --worker split share it")
}

// resolveJobs turns the --jobs value into a count, at most most unless that
// is 0; negative values are errors.
func resolveJobs(n, most int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("--jobs %d: want 0 (automatic) or a positive count", n)
	}
	if most > 0 && n > most {
		return 0, fmt.Errorf("--jobs %d: want 1 to %d", n, most)
	}
	if n == 0 {
		n = min(max(runtime.NumCPU(), 2), 8)
	}
	return n, nil
}

// termWidth is the width tables and plans fit: $COLUMNS when it is a
// positive number, else the width of the terminal stdout is, else 80.
func termWidth(cmd *cobra.Command) int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if f, ok := cmd.OutOrStdout().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
			return w
		}
	}
	return 80
}

// gib and mib convert bytes to the binary units every table uses.
func gib(b int64) float64 { return float64(b) / (1 << 30) }
func mib(b int64) float64 { return float64(b) / (1 << 20) }

// sizeUnits are the suffixes parseSize accepts: binary (KiB…TiB, the tool's
// units) and decimal (KB…TB, the units GPU data sheets often use).
var sizeUnits = []struct {
	suffix string
	bytes  float64
}{
	{"TIB", 1 << 40}, {"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// parseSize reads a byte count such as "141GiB", "80GB" or "1.5TiB".
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 0.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.bytes
			break
		}
	}
	if mult == 0 {
		return 0, fmt.Errorf("size %q needs a unit (e.g. 141GiB, 80GB)", s)
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || v <= 0 || math.IsInf(v, 0) || v*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: want a positive number and a unit (e.g. 141GiB)", s)
	}
	return int64(v * mult), nil
}

// cliError is an error said in the user's terms (msg) that still matches the
// library error it rewords (errors.Is); code, when not 0, is its exit status.
type cliError struct {
	msg  string
	err  error
	code int
}

func (e *cliError) Error() string { return e.msg }
func (e *cliError) Unwrap() error { return e.err }

// flagError is a flag value a library parser refused, said as the flag
// and what the parser knows, without the library's error class in front.
func flagError(flag string, err error) error {
	msg := err.Error()
	if u := errors.Unwrap(err); u != nil {
		msg = strings.TrimPrefix(msg, u.Error()+": ")
	}
	return &cliError{msg: "--" + flag + ": unknown " + msg, err: err}
}

// warn prints a warning on stderr, even under -q, wrapped to termWidth: it
// is read, not parsed. A word too long for a line (a list) breaks after commas.
func warn(cmd *cobra.Command, format string, a ...any) {
	width := termWidth(cmd)
	words := strings.Split("warning: "+fmt.Sprintf(format, a...), " ")
	for i, w := range words {
		if utf8.RuneCountInString(w) > width-2 {
			words[i] = strings.ReplaceAll(w, ",", ", ")
		}
	}
	fmt.Fprintln(cmd.ErrOrStderr(), termtext.Wrap(strings.Join(words, " "), width, "  "))
}
