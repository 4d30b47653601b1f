package generation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/sglprov/sglprov/pkg/treelock"
)

// Freed is one generation removed (or that would be, in a dry run).
type Freed struct {
	Key   string `json:"key"`
	Bytes int64  `json:"bytes"`
}

// Shared is a generation that another state dir's record lists too: it is left to it.
type Shared struct {
	Key string `json:"key"`
	// Record is the path of the other state dir's record.
	Record string `json:"record"`
}

// Pruned says what a prune kept and freed.
type Pruned struct {
	// Kept are the keys kept, the serving one first.
	Kept []string `json:"kept"`
	// Freed are the generations removed; Bytes their size together.
	Freed []Freed `json:"freed,omitempty"`
	Bytes int64   `json:"bytes"`
	// Shared are the generations left to another state dir that lists them (dropped from
	// this one's record, their folders kept).
	Shared []Shared `json:"shared,omitempty"`
}

// keptKeys returns the generations a prune keeps: the serving one and the newest passed
// ones up to keep, and besides, when given, the one being built.
func (s *Store) keptKeys(building string) []string {
	passed := make([]*Generation, 0, len(s.rec.Generations))
	for _, g := range s.rec.Generations {
		if !g.Passed.IsZero() {
			passed = append(passed, g)
		}
	}
	sort.SliceStable(passed, func(i, j int) bool { return passed[i].Passed.After(passed[j].Passed) })
	var kept []string
	if cur := s.Serving(); cur != "" {
		kept = append(kept, cur)
	}
	// The generation the record names stays too while the installed unit runs another
	// (Observe): the mismatch is repaired, never acted on by deletion.
	if s.runs != "" && s.rec.Current != "" {
		kept = append(kept, s.rec.Current)
	}
	for _, g := range passed {
		if len(kept) >= s.keep {
			break
		}
		if !contains(kept, g.Key) {
			kept = append(kept, g.Key)
		}
	}
	if building != "" && !contains(kept, building) {
		kept = append(kept, building)
	}
	return kept
}

// Prune removes the generations beyond the kept ones (see Passed): their folders and their
// records. With dryRun it only says what it would remove.
func (s *Store) Prune(dryRun bool) (*Pruned, error) {
	return s.lockedPrune(dryRun, "")
}

// PruneKeeping is Prune that also keeps the generation being built (gc while a new one is
// half built: it is the next apply's to finish).
func (s *Store) PruneKeeping(building string, dryRun bool) (*Pruned, error) {
	return s.lockedPrune(dryRun, building)
}

// lockedPrune is prune under the generations folder's lock (none needed for a dry run or
// when the folder is not there).
func (s *Store) lockedPrune(dryRun bool, building string) (*Pruned, error) {
	if !dryRun {
		if _, err := os.Lstat(s.dir); err == nil {
			l, err := s.lock()
			if err != nil {
				return nil, err
			}
			defer l.Release()
		}
	}
	return s.prune(dryRun, building)
}

// prune removes the generations beyond the kept ones; a generation the record of another
// state dir lists (Users) is left to it: dropped from this record, its folder kept.
func (s *Store) prune(dryRun bool, building string) (*Pruned, error) {
	kept := s.keptKeys(building)
	p := &Pruned{Kept: kept}
	others := s.others()
	var left []*Generation
	var errs []error
	for _, g := range s.rec.Generations {
		if contains(kept, g.Key) {
			left = append(left, g)
			continue
		}
		if by := sharedWith(others, g.Key); by != "" {
			p.Shared = append(p.Shared, Shared{Key: g.Key, Record: by})
			continue
		}
		size := DiskUsage(s.Path(g.Key))
		if !dryRun {
			if err := os.RemoveAll(s.Path(g.Key)); err != nil {
				errs = append(errs, fmt.Errorf("removing generation %s: %w", g.Key, err))
				left = append(left, g)
				continue
			}
		}
		p.Freed = append(p.Freed, Freed{Key: g.Key, Bytes: size})
		p.Bytes += size
	}
	if !dryRun && len(left) != len(s.rec.Generations) {
		s.rec.Generations = left
		if err := s.save(); err != nil {
			errs = append(errs, err)
		}
	}
	return p, errors.Join(errs...)
}

// removeTree removes a generation's folder (os.RemoveAll; tests make it fail).
var removeTree = os.RemoveAll

// RemoveAll removes every generation, the "current" link, the folder when empty, and the
// record (sglprov remove). A generation another state dir's record lists is left to it (in
// Shared), as are the link and the folder while another state dir uses them. With dryRun it
// only says what it would free.
func (s *Store) RemoveAll(dryRun bool) (*Pruned, error) {
	p := &Pruned{}
	var l *treelock.Lock
	if _, err := os.Lstat(s.dir); err == nil && !dryRun {
		var err error
		if l, err = s.lock(); err != nil {
			return nil, err
		}
		defer l.Release()
	}
	others := s.others()
	for _, g := range s.rec.Generations {
		if by := sharedWith(others, g.Key); by != "" {
			p.Shared = append(p.Shared, Shared{Key: g.Key, Record: by})
			continue
		}
		size := DiskUsage(s.Path(g.Key))
		p.Freed = append(p.Freed, Freed{Key: g.Key, Bytes: size})
		p.Bytes += size
	}
	if dryRun {
		return p, nil
	}
	var errs []error
	left := map[string]bool{}
	for _, f := range p.Freed {
		if err := removeTree(s.Path(f.Key)); err != nil {
			errs = append(errs, fmt.Errorf("removing generation %s: %w", f.Key, err))
			left[f.Key] = true
		}
	}
	if len(errs) > 0 {
		// What could not be removed stays recorded (and this state dir a user of the
		// folder), so that the next remove or gc finds it and tries again.
		kept := s.rec.Generations[:0]
		for _, g := range s.rec.Generations {
			if left[g.Key] {
				kept = append(kept, g)
			}
		}
		s.rec.Generations = kept
		if err := s.save(); err != nil {
			errs = append(errs, err)
		}
		if l != nil {
			l.Release()
		}
		p.Freed = slices.DeleteFunc(p.Freed, func(f Freed) bool { return left[f.Key] })
		return p, errors.Join(errs...)
	}
	if err := s.unregister(); err != nil {
		errs = append(errs, err)
	}
	if len(s.users(true)) == 0 {
		cur := filepath.Join(s.dir, CurrentLink)
		if fi, err := os.Lstat(cur); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			_ = os.Remove(cur)
		}
		if err := s.removeLinks(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(s.record); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing the generations record: %w", err))
	}
	if len(errs) == 0 {
		s.rec = Record{}
	}
	if l != nil {
		l.Release() // removes the lock folder when empty
	}
	_ = os.Remove(s.dir) // only when empty: what else is there is not ours
	return p, errors.Join(errs...)
}

// DiskUsage returns the bytes the regular files under path take (a file with several
// links counted once); 0 when path is not there.
func DiskUsage(path string) int64 {
	var total int64
	seen := map[[2]uint64]bool{}
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if id, ok := inode(fi); ok {
			if seen[id] {
				return nil
			}
			seen[id] = true
		}
		total += fi.Size()
		return nil
	})
	return total
}

// Describe says what a prune kept and freed, in one line.
func (p *Pruned) Describe(format func(int64) string) string {
	kept := make([]string, 0, len(p.Kept))
	for _, k := range p.Kept {
		kept = append(kept, Short(k))
	}
	s := "kept " + strings.Join(kept, ", ")
	if len(kept) == 0 {
		s = "kept none"
	}
	if len(p.Shared) > 0 {
		s += fmt.Sprintf("; left %d to the other state dir that lists them (%s)", len(p.Shared), p.Shared[0].Record)
	}
	if len(p.Freed) == 0 {
		return s + "; freed nothing"
	}
	freed := make([]string, 0, len(p.Freed))
	for _, f := range p.Freed {
		freed = append(freed, Short(f.Key))
	}
	return fmt.Sprintf("%s; freed %s (%s)", s, strings.Join(freed, ", "), format(p.Bytes))
}
