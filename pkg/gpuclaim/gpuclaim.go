// Package gpuclaim keeps the node-wide folder of GPU claims: one file per state dir and
// recipe whose run passed, naming the GPUs its server runs on and the state dir whose
// records say so, and a pending claim while a run is under way, so that a recipe applied
// from one state dir sees the GPUs of one applied from another. It judges a recipe's
// GPUs against them (Conflicts) without reading any state dir itself: a Ledger does.
package gpuclaim

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

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/refusal"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// NodeClaimsDir is the node-wide folder of GPU claims: one per state dir and recipe whose
// run passed, naming the state dir, so that a recipe applied from one state dir sees the
// GPUs of one applied from another. It is fixed, whatever --state-dir says (under --root,
// under the root), and holds only those claims.
const NodeClaimsDir = "/var/lib/sglprov/gpu-claims"

// maxClaims bounds the entries of a claims folder (claims, pending claims, anything
// else): a folder that holds more is refused, never read in part; maxClaimBytes bounds
// each claim.
const (
	maxClaims     = 8192
	maxClaimBytes = 64 << 10
)

// claimNameRE matches the names sglprov writes in a claims folder: claims, pending claims,
// and the lock.
var claimNameRE = regexp.MustCompile(`^([0-9a-f]{32}\.json(\.pending)?|\.lock)$`)

// Claim is one claim file: the record of the GPUs is the claiming state dir's own (its
// recipe's records), which Conflicts reads through a Ledger; the claim says where to look.
type Claim struct {
	Recipe   string   `json:"recipe"`
	StateDir string   `json:"state_dir"`
	GPUs     []string `json:"gpus"`
}

// AbsStateDir is a state dir as claims (and the node's registry of state dirs) name it:
// absolute and clean.
func AbsStateDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return filepath.Clean(dir)
}

// claimFile is the claim file of recipe applied from stateDir, in the claims folder dir.
func claimFile(dir, stateDir, recipe string) string {
	sum := sha256.Sum256([]byte(stateDir + "\x00" + recipe))
	return filepath.Join(dir, hex.EncodeToString(sum[:16])+".json")
}

// ReadDir returns the names of the entries of the claims folder dir, all of them: a
// folder of more than maxClaims entries is refused (exitcode.ErrHost), naming some of
// what sglprov did not write there and the fix, rather than read in part, where a real
// claim past the bound would go unseen. A folder that is not there holds none.
func ReadDir(dir string) ([]string, error) {
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

// readClaim reads the claim file at p; ok is false for one that cannot be read or is not
// a claim sglprov wrote.
func readClaim(p string) (c Claim, ok bool) {
	b, err := safefile.ReadRegular(p, maxClaimBytes)
	if err != nil || json.Unmarshal(b, &c) != nil {
		return Claim{}, false
	}
	return c, true
}

// StateDirs returns the state dirs the claims (not the pending ones) of the claims folder
// dir name, as absolute clean paths; a folder that cannot be read in full is an error.
func StateDirs(dir string) ([]string, error) {
	names, err := ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, n := range names {
		if !strings.HasSuffix(n, ".json") {
			continue
		}
		if c, ok := readClaim(filepath.Join(dir, n)); ok && filepath.IsAbs(c.StateDir) {
			dirs = append(dirs, filepath.Clean(c.StateDir))
		}
	}
	return dirs, nil
}

// Record writes the claim of recipe applied from stateDir in the claims folder dir
// (stateDir as AbsStateDir gives it), or, when gpus is empty, removes it.
func Record(dir, stateDir, recipe string, gpus []string) error {
	path := claimFile(dir, stateDir, recipe)
	if len(gpus) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing the GPU claim %s: %w", path, err)
		}
		return nil
	}
	b, err := json.MarshalIndent(Claim{Recipe: recipe, StateDir: stateDir, GPUs: gpus}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the GPU claim: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making the GPU claims folder: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the GPU claim: %w", err)
	}
	return nil
}

// Ledger reads what a state dir records of its recipes' GPUs.
type Ledger interface {
	// RecordedGPUs returns, for every recipe the state dir stateDir records, the GPUs its
	// records say its server runs on (none for a recipe that claims none).
	RecordedGPUs(stateDir string) (map[string][]string, error)
}

// Request is one recipe's claim to judge: the GPUs its server sees.
type Request struct {
	// Dir is the node's claims folder ("" compares only the recipes of StateDir).
	Dir string
	// StateDir is the recipe's state dir, as AbsStateDir gives it; Recipe its name.
	StateDir, Recipe string
	// GPUs are the IDs of the GPUs the recipe's server sees.
	GPUs []string
	// Replaces are the recipes it replaces; Replacing says its run stops their servers
	// (then they are no conflict).
	Replaces  []string
	Replacing bool
}

// Conflicts refuses a recipe whose server would share a GPU with another recipe's on this
// node: those of its own state dir as l records them, and those of other state dirs that
// the claims folder names. The error is a refusal (exitcode.ErrHost) naming the GPUs, the
// other recipe and the ways out; nil when none shares one.
func Conflicts(req Request, l Ledger) error {
	problems, err := sameStateDir(req, l)
	if err != nil {
		return err
	}
	others, err := otherStateDirs(req, l)
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

// sameStateDir returns the conflicts with the other recipes of the request's state dir.
func sameStateDir(req Request, l Ledger) ([]refusal.Reason, error) {
	recorded, err := l.RecordedGPUs(req.StateDir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(recorded))
	for name := range recorded {
		names = append(names, name)
	}
	sort.Strings(names)
	var problems []refusal.Reason
	for _, name := range names {
		replaced := slices.Contains(req.Replaces, name)
		if name == req.Recipe || replaced && req.Replacing {
			continue
		}
		shared := common(recorded[name], req.GPUs)
		if len(shared) > 0 {
			p := fmt.Sprintf("recipe %s serves on %s", name, strings.Join(shared, ", "))
			if replaced {
				p += " (this recipe replaces it, but its service manager cannot stop that recipe's server: replaces: is not applied under the exec manager; stop it with sglprov remove -f)"
			}
			problems = append(problems, refusal.Reason{Code: refusal.GPUClaim, Message: p, Fields: map[string]any{"recipe": name, "gpus": shared}})
		}
	}
	return problems, nil
}

// common returns the GPUs of claimed that mine names too, in claimed's order.
func common(claimed, mine []string) []string {
	var shared []string
	for _, id := range claimed {
		if slices.Contains(mine, id) {
			shared = append(shared, id)
		}
	}
	return shared
}

// otherStateDirs returns the conflicts with recipes applied from other state dirs: each
// claim of the claims folder from another state dir is checked against that state dir's
// own records (a recipe removed there, or a state dir gone, claims nothing any more); one
// whose state cannot be read is taken as it says. A recipe the request replaces is left
// out when replacing (its server is stopped by the switch), as in its own state dir.
func otherStateDirs(req Request, l Ledger) ([]refusal.Reason, error) {
	if req.Dir == "" {
		return nil, nil
	}
	entries, err := ReadDir(req.Dir)
	if err != nil {
		return nil, err
	}
	var out []refusal.Reason
	for _, name := range entries {
		pending := strings.HasSuffix(name, ".json"+pendingSuffix)
		if !strings.HasSuffix(name, ".json") && !pending {
			continue
		}
		if r, ok := otherClaim(req, l, filepath.Join(req.Dir, name), pending); ok {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Message < out[j].Message })
	return out, nil
}

// otherClaim judges the claim (or pending claim) at p against the request: the conflict,
// ok false when there is none.
func otherClaim(req Request, l Ledger, p string, pending bool) (refusal.Reason, bool) {
	c, ok := readClaim(p)
	if !ok || c.Recipe == "" || c.StateDir == "" || c.StateDir == req.StateDir {
		return refusal.Reason{}, false // this state dir's recipes are compared from its own state
	}
	if req.Replacing && slices.Contains(req.Replaces, c.Recipe) {
		return refusal.Reason{}, false
	}
	if pending && !pendingHeld(p) {
		return refusal.Reason{}, false // its run was killed: it claims nothing
	}
	claimed, note := c.GPUs, " (its state cannot be read)"
	if pending {
		note = " (a run of it in progress)"
	} else if recorded, err := l.RecordedGPUs(c.StateDir); err == nil {
		gpus, ok := recorded[c.Recipe]
		if !ok {
			return refusal.Reason{}, false // removed there, or the state dir is gone: the claim is stale
		}
		claimed, note = gpus, ""
	}
	shared := common(claimed, req.GPUs)
	if len(shared) == 0 {
		return refusal.Reason{}, false
	}
	return refusal.New(refusal.GPUClaim, map[string]any{"recipe": c.Recipe, "state_dir": c.StateDir, "gpus": shared},
		"recipe %s, applied with state dir %s%s, serves on %s", c.Recipe, c.StateDir, note, strings.Join(shared, ", ")), true
}
