package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

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
		if s.Kind != "smoke" || s.Details == nil {
			continue
		}
		tried, _ := s.Details["profiles"].([]any)
		if len(tried) == 0 {
			continue
		}
		if p == nil {
			p = &Profile{}
		}
		won, _ := s.Details["profile"].(string)
		p.Won = won
		for _, t := range tried {
			m, _ := t.(map[string]any)
			name, _ := m["profile"].(string)
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
