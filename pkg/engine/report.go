package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/refusal"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// Report is what one apply did; it is written to runs/<time>/report.json.
type Report struct {
	Recipe     string        `json:"recipe"`
	RecipeFile string        `json:"recipe_file"`
	Started    time.Time     `json:"started"`
	Duration   time.Duration `json:"duration_ns"`
	Result     string        `json:"result"`
	ExitCode   int           `json:"exit_code"`
	Error      string        `json:"error,omitempty"`
	// Refusals are every way the host fell short of the recipe, with codes and facts, when
	// the run was refused (exit 4).
	Refusals     []refusal.Reason  `json:"refusals,omitempty"`
	FactsChanged []string          `json:"facts_changed,omitempty"`
	Facts        map[string]string `json:"facts,omitempty"`
	Steps        []*StepReport     `json:"steps"`
	// Dir is the run's folder (report and step logs).
	Dir string `json:"dir"`
	// Generation says which generation this run built and which one serves (nil when the
	// recipe uses none).
	Generation *GenerationReport `json:"generation,omitempty"`
}

// StepReport is one step's outcome in a run.
type StepReport struct {
	Name     string         `json:"name"`
	Kind     string         `json:"kind"`
	Result   string         `json:"result"`
	Reason   string         `json:"reason"`
	Started  time.Time      `json:"started,omitzero"`
	Duration time.Duration  `json:"duration_ns"`
	Error    string         `json:"error,omitempty"`
	Log      string         `json:"log,omitempty"`
	Details  map[string]any `json:"details,omitempty"`
	// FromCache is the digest of the fleet cache artifact the step's outputs came from
	// (its result is then "ok (from cache)" in the summary); Pushed the digest of the
	// artifact it published.
	FromCache string `json:"from_cache,omitempty"`
	Pushed    string `json:"pushed,omitempty"`
	// Gate is set in a run's own report when the step is a gate (Gate: the smoke step),
	// so that what reads the report in process (the daemon's metrics) need not know the
	// kind's name; it is not written to report.json.
	Gate bool `json:"-"`

	err error
}

// Err returns the step's error, with its exit-code marks.
func (s *StepReport) Err() error { return s.err }

// HubDetail is the detail a download step sets (to the repository) when its files come
// from the Hugging Face hub: only then does a network failure's hint name HF_ENDPOINT.
const HubDetail = "hf_repo"

// NoteDetail is a step's detail for the summary table: a short sentence added to its
// reason (the gate's "profile A failed the gate; B serves").
const NoteDetail = "note"

// fromHub reports whether the step downloads from the hub (its HubDetail is set).
func (s *StepReport) fromHub() bool {
	v, ok := s.Details[HubDetail].(string)
	return ok && v != ""
}

// KeepRuns is how many run folders (report and step logs) the state directory keeps.
const KeepRuns = 50

func (e *Engine) newRunDir(start time.Time) (string, error) {
	runs := filepath.Join(e.opts.StateDir, "runs")
	if err := safefile.NoSymlinks(e.opts.StateDir, "runs"); err != nil {
		return "", fmt.Errorf("%w: creating run folder: %v", exitcode.ErrUsage, err)
	}
	if err := os.MkdirAll(runs, 0o700); err != nil {
		return "", fmt.Errorf("creating run folder: %w", err)
	}
	base := filepath.Join(runs, start.UTC().Format("20060102T150405.000Z"))
	dir := base
	for i := 1; ; i++ {
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			pruneRuns(runs, KeepRuns)
			return dir, nil
		}
		if !errors.Is(err, os.ErrExist) || i > 1000 {
			return "", fmt.Errorf("creating run folder: %w", err)
		}
		dir = fmt.Sprintf("%s-%d", base, i)
	}
}

// pruneRuns removes the oldest run folders beyond keep (names sort by time).
func pruneRuns(runs string, keep int) {
	entries, err := os.ReadDir(runs)
	if err != nil || len(entries) <= keep {
		return
	}
	for _, ent := range entries[:len(entries)-keep] {
		_ = os.RemoveAll(filepath.Join(runs, ent.Name()))
	}
}

func writeReport(rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding report: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(rep.Dir, "report.json"), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing report: %w", err)
	}
	return nil
}

// LatestReport reads the report of the newest run in the state directory.
func LatestReport(stateDir string) (*Report, error) {
	entries, err := os.ReadDir(filepath.Join(stateDir, "runs"))
	if err != nil {
		return nil, fmt.Errorf("reading runs: %w", err)
	}
	for i := len(entries) - 1; i >= 0; i-- {
		b, err := safefile.ReadNoFollow(filepath.Join(stateDir, "runs", entries[i].Name(), "report.json"))
		if err != nil {
			continue
		}
		var rep Report
		if err := json.Unmarshal(b, &rep); err != nil {
			return nil, fmt.Errorf("reading report: %w", err)
		}
		return &rep, nil
	}
	return nil, fmt.Errorf("no run has finished yet in %s", stateDir)
}

// Summary writes the apply summary table.
func (r *Report) Summary() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "STEP\tRESULT\tDURATION\tREASON")
	for _, s := range r.Steps {
		dur := "-"
		if s.Duration > 0 {
			dur = s.Duration.Round(time.Millisecond).String()
		}
		reason := s.Reason
		if s.Error != "" {
			reason += ": " + Cause(s.Error)
		}
		result := s.Result
		if s.FromCache != "" && result == ResultOK {
			result += " (from cache)"
			reason += "; artifact " + s.FromCache
		}
		if note, ok := s.Details[NoteDetail].(string); ok && note != "" {
			reason += "; " + note
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Name, result, dur, reason)
	}
	w.Flush()
	return b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// Hints says what to do about the failures that have a known fix (the network: a proxy,
// a hub mirror, the fleet cache), one line per failed step that has one.
func (r *Report) Hints() []string {
	var out []string
	for _, s := range r.Steps {
		if s.Result != ResultFailed {
			continue
		}
		if h := NetworkHint(s.Kind, s.Error, s.fromHub()); h != "" {
			out = append(out, "fix for "+s.Name+": "+h)
		}
	}
	return out
}

// Failures describes each failed step in full: its error with every line, the path of its
// log and, when the error is one line, the last tail lines of that log, and the fix when
// one is known (Hints). Empty when no step failed.
func (r *Report) Failures(tail int) string {
	var b strings.Builder
	for _, s := range r.Steps {
		if s.Result != ResultFailed {
			continue
		}
		msg := s.Error
		if msg == "" {
			msg = s.Reason
		}
		lines := strings.Split(strings.TrimRight(msg, "\n"), "\n")
		fmt.Fprintf(&b, "%s failed: %s\n", s.Name, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(&b, "  %s\n", l)
		}
		if h := NetworkHint(s.Kind, msg, s.fromHub()); h != "" {
			fmt.Fprintf(&b, "  fix: %s\n", h)
		}
		if s.Log == "" {
			continue
		}
		if !strings.Contains(msg, s.Log) {
			fmt.Fprintf(&b, "  log: %s\n", s.Log)
		}
		if len(lines) > 1 || tail <= 0 {
			continue
		}
		if last := lastLines(s.Log, tail); len(last) > 0 {
			fmt.Fprintf(&b, "  last %d lines of the log:\n", len(last))
			for _, l := range last {
				fmt.Fprintf(&b, "    %s\n", l)
			}
		}
	}
	return b.String()
}

// lastLines returns up to n last non-empty lines of the file at path (its last 64 KiB).
func lastLines(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	const window = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > window {
		_, _ = f.Seek(fi.Size()-window, 0)
	}
	b, _ := io.ReadAll(io.LimitReader(f, window))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimRight(l, "\r "); l != "" {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

func openStepLog(dir, step string) (*os.File, string, error) {
	path := filepath.Join(dir, step+".log")
	f, err := safefile.OpenNoFollow(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("opening step log: %w", err)
	}
	return f, path, nil
}
