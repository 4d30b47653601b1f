package reclaim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpuclaim"
)

// maxOtherStateBytes bounds the records read of another state dir (larger ones keep what
// they might name).
const maxOtherStateBytes = 64 << 20

// NodeScope says where remove and gc find the other state dirs of the node.
type NodeScope struct {
	// StateDirs is the registry of state dirs (engine.NodeStateDirsDir, under the root); "" is
	// none.
	StateDirs string
	// ClaimsDir is the node's GPU claims folder, whose claims name the state dirs of the
	// recipes that serve (state dirs an older sglprov did not register); "" is none.
	ClaimsDir string
}

// nodeUsers is what the recipes of the node's other state dirs use.
type nodeUsers struct {
	// states are the other state dirs' records, by state dir.
	states map[string]*engine.StateFile
	// unreadable are the other state dirs whose records cannot be read, with why.
	unreadable map[string]error
	// err is why the other state dirs are not all known (the registry cannot be read).
	err error
}

// loadNodeUsers reads the records of every other state dir of the node that scope leads
// to: its records are read without its lock (state.json is replaced whole, never written
// in place), so a daemon holding that lock does not stop a remove here.
func loadNodeUsers(scope NodeScope, self string) *nodeUsers {
	u := &nodeUsers{states: map[string]*engine.StateFile{}, unreadable: map[string]error{}}
	self = gpuclaim.AbsStateDir(self)
	dirs, err := engine.RegisteredStateDirs(scope.StateDirs)
	if err != nil {
		u.err = err
		return u
	}
	if scope.ClaimsDir != "" {
		claimed, err := gpuclaim.StateDirs(scope.ClaimsDir)
		if err != nil {
			u.err = err
			return u
		}
		dirs = append(dirs, claimed...)
	}
	for _, d := range dirs {
		if d == self || u.states[d] != nil || u.unreadable[d] != nil {
			continue
		}
		fi, err := os.Lstat(engine.StatePath(d))
		if errors.Is(err, fs.ErrNotExist) {
			continue // gone, or never written: it names nothing
		}
		if err == nil && fi.Size() > maxOtherStateBytes {
			u.unreadable[d] = fmt.Errorf("%s holds %d bytes, more than the %d read of another state dir", engine.StatePath(d), fi.Size(), maxOtherStateBytes)
			continue
		}
		f, err := engine.LoadStates(d)
		if err != nil {
			u.unreadable[d] = err
			continue
		}
		u.states[d] = f
	}
	return u
}

// keep returns why o, a folder, is not this state dir's to delete: the recipes of other
// state dirs that use a folder overlapping it, or that what they use cannot be known; ""
// when none does.
func (u *nodeUsers) keep(o Owned) string {
	if o.Kind == engine.OwnedUnit || o.Kind == engine.OwnedGPU {
		return ""
	}
	if u.err != nil {
		return "what other state dirs on the node use cannot be read (" + exitcode.Message(u.err) + ")"
	}
	var by []string
	dirs := make([]string, 0, len(u.states)+len(u.unreadable))
	for d := range u.states {
		dirs = append(dirs, d)
	}
	for d := range u.unreadable {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		if err := u.unreadable[d]; err != nil {
			by = append(by, "the records of state dir "+d+" cannot be read ("+exitcode.Message(err)+"), so what its recipes use is unknown")
			continue
		}
		f := u.states[d]
		names := make([]string, 0, len(f.Recipes))
		for name := range f.Recipes {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if usesAny(f.Recipes[name].Owns, o) {
				by = append(by, "used by recipe "+name+" of state dir "+d)
			}
		}
	}
	return strings.Join(by, "; ")
}
