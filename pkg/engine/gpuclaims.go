package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/ownership"
	"github.com/sglprov/sglprov/pkg/refusal"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// OwnedGPU is the Owned kind of a GPU a recipe's server runs on (its UUID, or "index N").
const OwnedGPU = ownership.KindGPU

// claimsGPUs reports whether the recipe runs a server (a step owns a unit) on a host with
// GPUs: such a recipe claims the GPUs it sees.
func (e *Engine) claimsGPUs(owned []Owned) bool {
	return len(e.seenGPUs()) > 0 && slices.ContainsFunc(owned, func(o Owned) bool { return o.Kind == OwnedUnit })
}

// seenGPUs returns the IDs of the GPUs the recipe's server sees: those of its facts (its
// requires.gpu.devices, else every GPU), or, for a recipe that loads no facts (it names no
// GPU need), every GPU of the host (NodeGPUs): nothing hides any from its server.
func (e *Engine) seenGPUs() []string {
	if e.opts.Facts != nil {
		return e.opts.Facts.IDs()
	}
	return e.opts.NodeGPUs
}

// gpuClaims returns the GPUs this recipe claims: those it sees once a run of it passed
// (its server serves there), else those an earlier run recorded. A recipe whose server
// never passed claims none, so that a failed switch does not lock the node.
func (e *Engine) gpuClaims(owned []Owned) []Owned {
	var out []Owned
	if e.served && e.claimsGPUs(owned) {
		for _, id := range e.seenGPUs() {
			out = append(out, Owned{Kind: OwnedGPU, Path: id})
		}
		return out
	}
	for _, o := range e.state.Owns {
		if o.Kind == OwnedGPU {
			out = append(out, o)
		}
	}
	return out
}

// Replacer is implemented by a step that takes over the services of the recipes its
// recipe replaces (the systemd step): AppliesReplaces reports whether it stops them before
// its own server starts. Under a service manager that cannot (exec, offline) it does not,
// and the replaced recipes' servers keep their GPUs.
type Replacer interface {
	AppliesReplaces(env *Env) bool
}

// ReplacesApplied reports whether the recipe's replaces: is carried out in this run: it
// names recipes and a step of it stops their services (Replacer). Only then are the
// replaced recipes' servers on the GPUs expected (the busy check, the GPU claims).
func (e *Engine) ReplacesApplied() bool {
	if len(e.opts.Recipe.Replaces) == 0 {
		return false
	}
	for _, n := range e.nodes {
		if r, ok := n.impl.(Replacer); ok && r.AppliesReplaces(e.env(n, nil, "")) {
			return true
		}
	}
	return false
}

// GPUConflicts refuses a recipe whose server would share a GPU with another recipe's on
// this node (both claim all GPUs unless requires.gpu.devices gives them some), unless the
// recipe replaces that one and a step of it stops that one's service (ReplacesApplied).
// The error is exitcode.ErrHost and names the GPUs, the other recipe and the ways out.
func (e *Engine) GPUConflicts() error {
	if e.opts.IgnoreState || !e.claimsGPUs(e.declared()) || e.opts.Root != "" && e.opts.Root != "/" {
		return nil
	}
	f, err := LoadStates(e.opts.StateDir)
	if err != nil {
		return err
	}
	mine := e.seenGPUs()
	replacing := e.ReplacesApplied()
	var problems []refusal.Reason
	names := make([]string, 0, len(f.Recipes))
	for name := range f.Recipes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		replaced := slices.Contains(e.opts.Recipe.Replaces, name)
		if name == e.opts.Recipe.Name || replaced && replacing {
			continue
		}
		var shared []string
		for _, o := range f.Recipes[name].Owns {
			if o.Kind == OwnedGPU && slices.Contains(mine, o.Path) {
				shared = append(shared, o.Path)
			}
		}
		if len(shared) > 0 {
			p := fmt.Sprintf("recipe %s serves on %s", name, strings.Join(shared, ", "))
			if replaced {
				p += " (this recipe replaces it, but its service manager cannot stop that recipe's server: replaces: is not applied under the exec manager; stop it with sglprov remove -f)"
			}
			problems = append(problems, refusal.Reason{Code: refusal.GPUClaim, Message: p, Fields: map[string]any{"recipe": name, "gpus": shared}})
		}
	}
	others, err := e.otherStateDirClaims(mine, replacing)
	if err != nil {
		return err
	}
	problems = append(problems, others...)
	if len(problems) == 0 {
		return nil
	}
	return &refusal.Error{Head: "this recipe's server would share GPUs with another recipe's", Reasons: problems,
		Tail: "; give the recipes requires.gpu.devices that do not overlap, add replaces: [RECIPE] to switch the node over, or sglprov remove -f the other recipe"}
}

// NodeClaimsDir is the node-wide folder of GPU claims: one per state dir and recipe whose
// run passed, naming the state dir, so that a recipe applied from one state dir sees the
// GPUs of one applied from another. It is fixed, whatever --state-dir says (under --root,
// under the root), and holds only those claims.
const NodeClaimsDir = "/var/lib/sglprov/gpu-claims"

// maxClaims bounds the entries of ClaimsDir (claims, pending claims, anything else): a
// folder that holds more is refused, never read in part; maxClaimBytes bounds each claim.
const (
	maxClaims     = 8192
	maxClaimBytes = 64 << 10
)

// claimNameRE matches the names sglprov writes in ClaimsDir: claims, pending claims, and
// the lock.
var claimNameRE = regexp.MustCompile(`^([0-9a-f]{32}\.json(\.pending)?|\.lock)$`)

// readClaimsDir returns the names of the entries of the claims folder dir, all of them:
// a folder of more than maxClaims entries is refused (exitcode.ErrHost), naming some of
// what sglprov did not write there and the fix, rather than read in part, where a real
// claim past the bound would go unseen. A folder that is not there holds none.
func readClaimsDir(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the node's GPU claims: %w", err)
	}
	defer f.Close()
	var names, junk []string
	nJunk := 0
	for {
		batch, err := f.Readdirnames(1024)
		for _, n := range batch {
			if !claimNameRE.MatchString(n) {
				nJunk++
				if len(junk) < 5 {
					junk = append(junk, n)
				}
			}
		}
		names = append(names, batch...)
		if len(names) > maxClaims {
			return nil, fmt.Errorf("%w: the node's GPU claims folder %s holds more than %d entries, %d or more of them not claims sglprov wrote (such as %s): the claims cannot all be read, so no GPU conflict could be ruled out; remove what sglprov did not write there (it writes only HEX.json, HEX.json.pending and .lock)",
				exitcode.ErrHost, dir, maxClaims, nJunk, strings.Join(junk, ", "))
		}
		if errors.Is(err, io.EOF) || err == nil && len(batch) == 0 {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the node's GPU claims in %s: %w", dir, err)
		}
	}
	sort.Strings(names)
	return names, nil
}

// nodeClaim is one claim file of ClaimsDir: the record of the GPUs is the claiming state
// dir's own (its recipe's Owns), which GPUConflicts reads; the claim says where to look.
type nodeClaim struct {
	Recipe   string   `json:"recipe"`
	StateDir string   `json:"state_dir"`
	GPUs     []string `json:"gpus"`
}

// claimFile is the claim file of recipe applied from stateDir.
func claimFile(dir, stateDir, recipe string) string {
	sum := sha256.Sum256([]byte(stateDir + "\x00" + recipe))
	return filepath.Join(dir, hex.EncodeToString(sum[:16])+".json")
}

// absStateDir is the state dir as claims name it: absolute and clean.
func absStateDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return filepath.Clean(dir)
}

// recordNodeClaim writes (or, when the recipe claims no GPU, removes) this recipe's claim
// in ClaimsDir.
func (e *Engine) recordNodeClaim() error {
	if e.opts.ClaimsDir == "" || e.opts.IgnoreState {
		return nil
	}
	var gpus []string
	for _, o := range e.gpuClaims(e.owns()) {
		gpus = append(gpus, o.Path)
	}
	stateDir := absStateDir(e.opts.StateDir)
	path := claimFile(e.opts.ClaimsDir, stateDir, e.opts.Recipe.Name)
	if len(gpus) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing the GPU claim %s: %w", path, err)
		}
		return nil
	}
	b, err := json.MarshalIndent(nodeClaim{Recipe: e.opts.Recipe.Name, StateDir: stateDir, GPUs: gpus}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the GPU claim: %w", err)
	}
	if err := os.MkdirAll(e.opts.ClaimsDir, 0o755); err != nil {
		return fmt.Errorf("making the GPU claims folder: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the GPU claim: %w", err)
	}
	return nil
}

// pendingSuffix ends the name of a pending claim: the GPUs a run of a recipe from one
// state dir claims while it runs, before it passed. Its run holds an exclusive flock on it
// until it ends; one that no process holds is stale (its run was killed) and claims nothing.
const pendingSuffix = ".pending"

// claimsLockName is the lock file in ClaimsDir that makes a run's check of the claims and
// its pending claim one step: two runs from two state dirs starting at once (each state
// dir's own lock does not keep them apart) cannot both pass the check.
const claimsLockName = ".lock"

// claimPending checks the GPU claims (GPUConflicts) and, when the recipe runs a server on
// GPUs and a node-wide claims folder is kept, writes this run's pending claim, both under
// the claims folder's lock: a run from another state dir that starts meanwhile sees the
// pending claim and is refused as it would be by a claim of a run that passed. The pending
// claim is held (flock) until releasePending.
func (e *Engine) claimPending() error {
	if e.opts.ClaimsDir == "" || e.opts.IgnoreState || !e.claimsGPUs(e.declared()) || e.opts.Root != "" && e.opts.Root != "/" {
		return e.GPUConflicts()
	}
	if err := os.MkdirAll(e.opts.ClaimsDir, 0o755); err != nil {
		e.log.Warn("the GPU claims folder cannot be made: runs from other state dirs starting now will not see this one's", "err", err)
		return e.GPUConflicts()
	}
	lock, err := safefile.OpenNoFollow(filepath.Join(e.opts.ClaimsDir, claimsLockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		e.log.Warn("the GPU claims folder cannot be locked: runs from other state dirs starting now will not see this one's", "err", err)
		return e.GPUConflicts()
	}
	defer lock.Close()
	if err := flockWait(lock, syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking the GPU claims folder: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if err := e.GPUConflicts(); err != nil {
		return err
	}
	stateDir := absStateDir(e.opts.StateDir)
	b, err := json.MarshalIndent(nodeClaim{Recipe: e.opts.Recipe.Name, StateDir: stateDir, GPUs: e.seenGPUs()}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the pending GPU claim: %w", err)
	}
	path := claimFile(e.opts.ClaimsDir, stateDir, e.opts.Recipe.Name) + pendingSuffix
	_ = os.Remove(path) // a stale one (a killed run of this recipe); never written through
	f, err := safefile.OpenNoFollow(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("writing the pending GPU claim: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("locking the pending GPU claim %s: %w", path, err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("writing the pending GPU claim: %w", err)
	}
	e.pending = f
	return nil
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

// releasePending removes this run's pending claim and lets go of it: by then the run wrote
// its claim (it passed) or claims nothing new (it failed).
func (e *Engine) releasePending() {
	if e.pending == nil {
		return
	}
	_ = os.Remove(e.pending.Name())
	e.pending.Close()
	e.pending = nil
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

// otherStateDirClaims returns the conflicts with recipes applied from other state dirs:
// each claim of ClaimsDir from another state dir is checked against that state dir's own
// records (a recipe removed there, or a state dir gone, claims nothing any more); one whose
// state cannot be read is taken as it says. A recipe this one replaces is left out when
// replacing (its server is stopped by the switch), as in this state dir.
func (e *Engine) otherStateDirClaims(mine []string, replacing bool) ([]refusal.Reason, error) {
	if e.opts.ClaimsDir == "" {
		return nil, nil
	}
	entries, err := readClaimsDir(e.opts.ClaimsDir)
	if err != nil {
		return nil, err
	}
	self := absStateDir(e.opts.StateDir)
	var out []refusal.Reason
	for _, name := range entries {
		pending := strings.HasSuffix(name, ".json"+pendingSuffix)
		if !strings.HasSuffix(name, ".json") && !pending {
			continue
		}
		p := filepath.Join(e.opts.ClaimsDir, name)
		b, err := safefile.ReadRegular(p, maxClaimBytes)
		if err != nil {
			continue
		}
		var c nodeClaim
		if json.Unmarshal(b, &c) != nil || c.Recipe == "" || c.StateDir == "" || c.StateDir == self {
			continue // this state dir's recipes are compared from its own state
		}
		if replacing && slices.Contains(e.opts.Recipe.Replaces, c.Recipe) {
			continue
		}
		if pending && !pendingHeld(p) {
			continue // its run was killed: it claims nothing
		}
		claimed, note := c.GPUs, " (its state cannot be read)"
		if pending {
			note = " (a run of it in progress)"
		} else if f, err := LoadStates(c.StateDir); err == nil {
			st := f.Recipes[c.Recipe]
			if st == nil {
				continue // removed there, or the state dir is gone: the claim is stale
			}
			claimed, note = nil, ""
			for _, o := range st.Owns {
				if o.Kind == OwnedGPU {
					claimed = append(claimed, o.Path)
				}
			}
		}
		var shared []string
		for _, id := range claimed {
			if slices.Contains(mine, id) {
				shared = append(shared, id)
			}
		}
		if len(shared) > 0 {
			out = append(out, refusal.New(refusal.GPUClaim, map[string]any{"recipe": c.Recipe, "state_dir": c.StateDir, "gpus": shared},
				"recipe %s, applied with state dir %s%s, serves on %s", c.Recipe, c.StateDir, note, strings.Join(shared, ", ")))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Message < out[j].Message })
	return out, nil
}
