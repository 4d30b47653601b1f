package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gatedswitch"
)

// Status is what `status --json` prints: the state dir's last runs.
type Status struct {
	StateDir string `json:"state_dir"`
	// Message says that no run was recorded (then State and Report are absent), or that
	// the recipe was removed.
	Message string `json:"message,omitempty"`
	// Removed is when sglprov remove took the recipe off the node, after its last run.
	Removed *time.Time     `json:"removed,omitempty"`
	State   *engine.State  `json:"state,omitempty"`
	Report  *engine.Report `json:"last_run,omitempty"`
	// ExitCode is the last run's exit code, which is also status's own.
	ExitCode int `json:"exit_code"`
	// Profile is the profile the service runs and whether it passed the gate.
	Profile *Profile `json:"profile,omitempty"`
	// ApplyRunning is the pid of an apply running now (-1 when its pid is unknown).
	ApplyRunning int `json:"apply_running_pid,omitempty"`
	// Interrupted lists the steps that the state records as running while no apply runs:
	// the last run ended before it finished them (then ExitCode is 1).
	Interrupted []string `json:"interrupted_steps,omitempty"`
	// Daemon is the pid of the sglprov daemon that watches the node (holds its lock).
	Daemon int `json:"daemon_pid,omitempty"`
	// Recipes is each recipe's last run, the newest first, when the state dir holds
	// several (the fields above are the first's).
	Recipes []RecipeStatus `json:"recipes,omitempty"`
	// Generations are the first recipe's generations, newest first (absent when it keeps
	// none): which serves, where `sglprov rollback` goes, which passed and which failed.
	Generations []GenerationEntry `json:"generations,omitempty"`
}

// RecipeStatus is one recipe's last run in `status --json` of a state dir with several.
type RecipeStatus struct {
	Recipe string `json:"recipe"`
	// ExitCode is the recipe's last run's exit code (1 when it was killed).
	ExitCode int            `json:"exit_code"`
	Report   *engine.Report `json:"last_run,omitempty"`
	// Interrupted lists the steps the recipe's last run was running when it ended.
	Interrupted []string `json:"interrupted_steps,omitempty"`
	Profile     *Profile `json:"profile,omitempty"`
	// Removed is when sglprov remove took the recipe off the node, after its last run.
	Removed *time.Time `json:"removed,omitempty"`
	// Generations are the recipe's generations, newest first (absent when it keeps none).
	Generations []GenerationEntry `json:"generations,omitempty"`
}

// Reading is the state dir's last runs as status reads them.
type Reading struct {
	// Dir is the state dir; Only the recipe read alone ("": every recipe).
	Dir, Only string
	// Running is the pid of an apply running now (-1: its pid is unknown; 0: none);
	// Daemon the pid of the daemon that holds the node (0: none).
	Running, Daemon int
	// Runs is each recipe's last run, the newest first; never empty: with no run recorded
	// it holds one empty state.
	Runs []engine.RecipeRun
	// ExitCode is the newest failed run's exit code, 0 when each passed, 1 when none was
	// recorded (0 while an apply runs); status exits with it.
	ExitCode int
	// None is set when no step record and no report was found.
	None bool
}

// ReadStatus reads dir's last runs (only's alone unless ""), and who holds its lock
// (ApplyRunning, through sharedLock).
func ReadStatus(dir, only string, sharedLock func(dir string) (*engine.Lock, error)) (*Reading, error) {
	running, daemonPid := ApplyRunning(dir, sharedLock)
	runs, err := engine.LastRuns(dir, only, running != 0)
	if err != nil {
		return nil, err
	}
	rd := &Reading{Dir: dir, Only: only, Running: running, Daemon: daemonPid, Runs: runs, ExitCode: engine.LastRunsExitCode(runs)}
	if len(runs) == 0 {
		rd.Runs = []engine.RecipeRun{{State: &engine.State{Version: engine.StateVersion, Steps: map[string]*engine.StepRecord{}}}}
	}
	first := rd.Runs[0]
	rd.None = len(first.State.Steps) == 0 && first.Report == nil
	if rd.None && running != 0 {
		rd.ExitCode = 0
	}
	return rd, nil
}

// Status is rd as `status --json` prints it. No run recorded is not a success: a script
// that runs status after starting the daemon (cloud-init's runcmd) must not read "nothing
// ran" as "the node serves".
func (rd *Reading) Status() Status {
	first := rd.Runs[0]
	out := Status{StateDir: rd.Dir, Report: first.Report, ExitCode: rd.ExitCode, Profile: ProfileOf(first.Report, first.State),
		ApplyRunning: rd.Running, Interrupted: first.Killed, Daemon: rd.Daemon}
	if rd.None && rd.Running == 0 {
		out.Message = "no run recorded in " + rd.Dir
		if rd.Only != "" {
			out.Message = "no run of recipe " + rd.Only + " recorded in " + rd.Dir
		}
	} else {
		out.State = first.State
	}
	if !first.Removed.IsZero() {
		t := first.Removed
		out.Removed, out.Profile = &t, nil
		out.Message = "recipe " + first.Recipe + " was removed at " + t.Format(time.RFC3339) + " (sglprov remove): nothing of it is on the node"
	}
	if len(rd.Runs) > 1 {
		for _, rr := range rd.Runs {
			rs := RecipeStatus{Recipe: rr.Recipe, ExitCode: rr.ExitCode, Report: rr.Report,
				Interrupted: rr.Killed, Profile: ProfileOf(rr.Report, rr.State)}
			if !rr.Removed.IsZero() {
				t := rr.Removed
				rs.Removed, rs.Profile = &t, nil
			}
			out.Recipes = append(out.Recipes, rs)
		}
	}
	return out
}

// ReadShared takes dir's lock shared (sharedLock; engine.AcquireSharedLock when nil) for a
// reader that reads the state while it holds it (plan), so that no apply starts meanwhile.
// When an apply or the daemon holds it, lock is nil and running and daemonPid say who
// (as ApplyRunning): the steps the state records as running are running now.
func ReadShared(dir string, sharedLock func(dir string) (*engine.Lock, error)) (lock *engine.Lock, running, daemonPid int, err error) {
	if sharedLock == nil {
		sharedLock = engine.AcquireSharedLock
	}
	lock, err = sharedLock(dir)
	if errors.Is(err, exitcode.ErrLocked) {
		running, daemonPid = holders(dir)
		return nil, running, daemonPid, nil
	}
	return lock, 0, 0, err
}

// ApplyRunning returns the pid of the apply that holds dir's lock now (-1 when it wrote
// none), or 0 when none does, and the daemon's pid when a daemon holds it (between its
// applies a daemon is not an apply running). It takes the lock shared and gives it back at
// once (with sharedLock: engine.AcquireSharedLock when nil), so that status never keeps
// an apply from starting.
func ApplyRunning(dir string, sharedLock func(dir string) (*engine.Lock, error)) (running, daemonPid int) {
	if sharedLock == nil {
		sharedLock = engine.AcquireSharedLock
	}
	lock, err := sharedLock(dir)
	if !errors.Is(err, exitcode.ErrLocked) {
		lock.Release()
		return 0, 0
	}
	return holders(dir)
}

// holders says who holds dir's lock (it is held): the apply's pid (-1 when it wrote none)
// and, when the daemon holds it, the daemon's.
func holders(dir string) (running, daemonPid int) {
	pid := engine.LockHolder(dir)
	switch engine.LockNote(dir) {
	case engine.NoteDaemon:
		return 0, pid
	case engine.NoteDaemonApplying:
		return pid, pid
	}
	if pid > 0 {
		return pid, 0
	}
	return -1, 0
}

// Profile is the backend profile of the recipe's service as the last run left it.
type Profile struct {
	// Step is the service step.
	Step string `json:"step"`
	// Running is the profile the installed unit has (the state's record).
	Running string `json:"running,omitempty"`
	// Won is the profile that passed the gate in the last run ("" when none did).
	Won string `json:"won,omitempty"`
	// Failed lists the profiles the last run's gate rejected.
	Failed []string `json:"failed,omitempty"`
	// AllFailed is true when every candidate failed the gate in the last run.
	AllFailed bool `json:"all_failed,omitempty"`
}

// ProfileOf reads the service's profile from the state and the last report's gate.
func ProfileOf(rep *engine.Report, st *engine.State) *Profile {
	var p *Profile
	for name, rec := range st.Steps {
		var data struct {
			Active string `json:"active"`
			Winner string `json:"winner"`
		}
		if len(rec.Data) == 0 || json.Unmarshal(rec.Data, &data) != nil || data.Active == "" && data.Winner == "" {
			continue
		}
		if p == nil || name < p.Step {
			p = &Profile{Step: name, Running: data.Active}
		}
	}
	if rep == nil {
		return p
	}
	for _, s := range rep.Steps {
		tried, won, ok := gatedswitch.ProfilesOf(s.Details)
		if !ok {
			continue
		}
		if p == nil {
			p = &Profile{}
		}
		p.Won = won
		for _, name := range tried {
			if name != "" && name != won {
				p.Failed = append(p.Failed, name)
			}
		}
		p.AllFailed = won == "" && s.Result == engine.ResultFailed
		break
	}
	return p
}

// Write prints the profile as status shows it: one line, nothing for a nil p.
func (p *Profile) Write(w io.Writer) {
	if p == nil {
		return
	}
	switch {
	case p.AllFailed:
		fmt.Fprintf(w, "profile: every candidate failed the gate (%s)", strings.Join(p.Failed, ", "))
		if p.Running != "" {
			fmt.Fprintf(w, "; the unit runs %s", p.Running)
		}
		fmt.Fprintln(w)
	case p.Won != "":
		fmt.Fprintf(w, "profile: %s passed the gate", p.Won)
		if len(p.Failed) > 0 {
			fmt.Fprintf(w, " (failed before it: %s)", strings.Join(p.Failed, ", "))
		}
		fmt.Fprintln(w)
	case p.Running != "":
		fmt.Fprintf(w, "profile: %s (installed; the last run did not gate it)\n", p.Running)
	}
}
