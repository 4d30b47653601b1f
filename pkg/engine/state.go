package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// StateVersion is the version of state.json this build writes.
const StateVersion = 1

// Results a step record can hold.
const (
	ResultOK          = "ok"
	ResultFailed      = "failed"
	ResultInterrupted = "interrupted"
	ResultRunning     = "running"
	ResultBlocked     = "blocked"
	ResultSkipped     = "skipped"
	ResultNotSelected = "not selected"
)

// State is what state.json holds: the last known outcome of every step.
type State struct {
	Version int                        `json:"version"`
	Recipe  string                     `json:"recipe"`
	Updated time.Time                  `json:"updated"`
	Facts   map[string]string          `json:"facts,omitempty"`
	Steps   map[string]*StepRecord     `json:"steps"`
	Extra   map[string]json.RawMessage `json:"extra,omitempty"`
}

// StepRecord is the recorded outcome of one step.
type StepRecord struct {
	// Fingerprint digests Parts.
	Fingerprint string `json:"fingerprint"`
	// Parts are the digests of the named inputs.
	Parts map[string]string `json:"parts,omitempty"`
	// Result is ok, failed, interrupted or running (a run that died without recording).
	Result string `json:"result"`
	// Started and Duration of the last time the step ran.
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// Reason the step last ran, and the error when it failed.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// PID of the run that recorded "running".
	PID int `json:"pid,omitempty"`
	// Artifact is the digest of the fleet cache artifact the step's outputs came from or
	// were published as, on its last successful run.
	Artifact string `json:"artifact,omitempty"`
	// Data is the step's own record (verified files, the winning profile, ...).
	Data json.RawMessage `json:"data,omitempty"`
}

// StatePath returns the path of state.json in dir.
func StatePath(dir string) string { return filepath.Join(dir, "state.json") }

// LoadState reads state.json from dir; a missing file is an empty state.
func LoadState(dir string) (*State, error) {
	st := &State{Version: StateVersion, Steps: map[string]*StepRecord{}}
	b, err := safefile.ReadNoFollow(StatePath(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if errors.Is(err, safefile.ErrNotRegular) || errors.Is(err, safefile.ErrSymlink) {
		return nil, fmt.Errorf("%w: reading state: %v; remove it", ErrUsage, err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading state: %w", err)
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("reading state %s: %w (move it away to start afresh)", StatePath(dir), err)
	}
	if st.Version > StateVersion {
		return nil, fmt.Errorf("reading state %s: version %d is newer than this sglprov understands (%d)", StatePath(dir), st.Version, StateVersion)
	}
	if st.Steps == nil {
		st.Steps = map[string]*StepRecord{}
	}
	return st, nil
}

// Save writes the state atomically: a temporary file, fsynced, renamed over state.json,
// and the directory fsynced.
func (s *State) Save(dir string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	if err := atomicfile.Write(StatePath(dir), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	return nil
}

// EnsureStateDir creates the state directory with mode 0700 (and corrects the mode of an
// existing one). It refuses a state directory that holds a symbolic link, and, unless
// insecure is set (--insecure-permissions), one that is owned by someone other than root
// or the invoking user or lies in a folder others can write (see CheckPermissions).
func EnsureStateDir(dir string, insecure bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating state dir: %w", err)
	}
	if !insecure {
		if err := CheckPermissions(dir); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("setting state dir mode: %w", err)
	}
	if err := safefile.NoSymlinks(dir); err != nil {
		return fmt.Errorf("%w: state dir: %v", ErrUsage, err)
	}
	return nil
}
