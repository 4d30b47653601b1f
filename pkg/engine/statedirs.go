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
	"sort"
	"strings"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpuclaim"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// NodeStateDirsDir is the node-wide registry of state dirs: one small file per state dir
// that a run wrote records into, naming it, so that remove and gc in one state dir see what
// the recipes of every other state dir on the node use (a weights folder two state dirs
// share). It is fixed, whatever --state-dir says (under --root, under the root). A state dir
// is registered before its run writes anything, so a run killed at any point leaves no
// records that the registry does not lead to; an entry whose state dir is gone names
// nothing.
const NodeStateDirsDir = "/var/lib/sglprov/state-dirs"

// maxStateDirs bounds the entries of the registry; maxStateDirBytes each entry.
const (
	maxStateDirs     = 8192
	maxStateDirBytes = 16 << 10
)

// stateDirNameRE matches the names sglprov writes in the registry.
var stateDirNameRE = regexp.MustCompile(`^[0-9a-f]{32}\.json$`)

// stateDirEntry is one file of the registry.
type stateDirEntry struct {
	StateDir string `json:"state_dir"`
}

// RegisterStateDir records the state dir dir in the registry reg ("" keeps none): written
// once, atomically, before the run that writes records there starts.
func RegisterStateDir(reg, dir string) error {
	if reg == "" {
		return nil
	}
	abs := gpuclaim.AbsStateDir(dir)
	sum := sha256.Sum256([]byte(abs))
	path := filepath.Join(reg, hex.EncodeToString(sum[:16])+".json")
	if b, err := safefile.ReadNoFollow(path); err == nil {
		var e stateDirEntry
		if json.Unmarshal(b, &e) == nil && e.StateDir == abs {
			return nil
		}
	}
	b, err := json.Marshal(stateDirEntry{StateDir: abs})
	if err != nil {
		return fmt.Errorf("encoding the state dir's entry: %w", err)
	}
	if err := os.MkdirAll(reg, 0o755); err != nil {
		return fmt.Errorf("making the node's registry of state dirs %s: %w", reg, err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("registering the state dir %s in %s: %w", abs, reg, err)
	}
	return nil
}

// RegisteredStateDirs returns the state dirs the registry reg names, all of them: a
// registry of more than maxStateDirs entries is refused (exitcode.ErrHost), naming some of
// what sglprov did not write there, rather than read in part. An entry that cannot be read
// is named in the error too: the state dir it would name is unknown.
func RegisteredStateDirs(reg string) ([]string, error) {
	f, err := os.Open(reg)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the node's registry of state dirs: %w", err)
	}
	defer f.Close()
	var names, junk []string
	for {
		batch, err := f.Readdirnames(1024)
		for _, n := range batch {
			if !stateDirNameRE.MatchString(n) && !strings.HasPrefix(n, ".") && len(junk) < 5 {
				junk = append(junk, n)
			}
		}
		names = append(names, batch...)
		if len(names) > maxStateDirs {
			return nil, fmt.Errorf("%w: the node's registry of state dirs %s holds more than %d entries (such as %s): it cannot all be read, so what other state dirs use is unknown; remove what sglprov did not write there (it writes only HEX.json)",
				exitcode.ErrHost, reg, maxStateDirs, strings.Join(junk, ", "))
		}
		if errors.Is(err, io.EOF) || err == nil && len(batch) == 0 {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the node's registry of state dirs %s: %w", reg, err)
		}
	}
	sort.Strings(names)
	var dirs []string
	for _, n := range names {
		if !stateDirNameRE.MatchString(n) {
			continue
		}
		p := filepath.Join(reg, n)
		b, err := safefile.ReadRegular(p, maxStateDirBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var e stateDirEntry
		if err == nil {
			err = json.Unmarshal(b, &e)
		}
		if err == nil && !filepath.IsAbs(e.StateDir) {
			err = fmt.Errorf("%q is not an absolute path", e.StateDir)
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s of the node's registry of state dirs: %w (sglprov writes {\"state_dir\": DIR} there: fix or delete it)", p, err)
		}
		dirs = append(dirs, filepath.Clean(e.StateDir))
	}
	return dirs, nil
}
