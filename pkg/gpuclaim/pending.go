package gpuclaim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sglprov/sglprov/pkg/safefile"
)

// pendingSuffix ends the name of a pending claim: the GPUs a run of a recipe from one
// state dir claims while it runs, before it passed. Its run holds an exclusive flock on it
// until it ends; one that no process holds is stale (its run was killed) and claims nothing.
const pendingSuffix = ".pending"

// claimsLockName is the lock file in a claims folder that makes a run's check of the
// claims and its pending claim one step: two runs from two state dirs starting at once
// (each state dir's own lock does not keep them apart) cannot both pass the check.
const claimsLockName = ".lock"

// Pending is a run's pending claim, held (flock) until Release.
type Pending struct {
	f *os.File
}

// Hold checks the claims (Conflicts) and writes the request's pending claim in req.Dir,
// both under the claims folder's lock: a run from another state dir that starts meanwhile
// sees the pending claim and is refused as it would be by a claim of a run that passed.
// A claims folder that cannot be made or locked is warned about (warn) and only checked:
// the Pending is then nil, as it is when the check refuses.
func Hold(req Request, l Ledger, warn func(msg string, err error)) (*Pending, error) {
	if err := os.MkdirAll(req.Dir, 0o755); err != nil {
		warn("the GPU claims folder cannot be made: runs from other state dirs starting now will not see this one's", err)
		return nil, Conflicts(req, l)
	}
	lock, err := safefile.OpenNoFollow(filepath.Join(req.Dir, claimsLockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		warn("the GPU claims folder cannot be locked: runs from other state dirs starting now will not see this one's", err)
		return nil, Conflicts(req, l)
	}
	defer lock.Close()
	if err := flockWait(lock, syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("locking the GPU claims folder: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if err := Conflicts(req, l); err != nil {
		return nil, err
	}
	return writePending(req)
}

// writePending writes and locks the request's pending claim.
func writePending(req Request) (*Pending, error) {
	b, err := json.MarshalIndent(Claim{Recipe: req.Recipe, StateDir: req.StateDir, GPUs: req.GPUs}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the pending GPU claim: %w", err)
	}
	path := claimFile(req.Dir, req.StateDir, req.Recipe) + pendingSuffix
	_ = os.Remove(path) // a stale one (a killed run of this recipe); never written through
	f, err := safefile.OpenNoFollow(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("writing the pending GPU claim: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the pending GPU claim %s: %w", path, err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("writing the pending GPU claim: %w", err)
	}
	return &Pending{f: f}, nil
}

// Release removes the pending claim and lets go of it: by then the run wrote its claim
// (it passed) or claims nothing new (it failed). A nil Pending holds nothing.
func (p *Pending) Release() {
	if p == nil || p.f == nil {
		return
	}
	_ = os.Remove(p.f.Name())
	p.f.Close()
	p.f = nil
}

// flockWait takes the flock how on f, waiting for it; a wait a signal interrupts goes on.
func flockWait(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// pendingHeld reports whether a live run holds the pending claim at path (flock).
func pendingHeld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
