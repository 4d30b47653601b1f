package generation

import (
	"encoding/json"
	"errors"
	"os"
)

// Generations returns the generations in the record, oldest first.
func (s *Store) Generations() []Generation {
	out := make([]Generation, 0, len(s.rec.Generations))
	for _, g := range s.rec.Generations {
		out = append(out, *g)
	}
	return out
}

// find returns the recorded generation with key (nil when there is none).
func (s *Store) find(key string) *Generation {
	for _, g := range s.rec.Generations {
		if g.Key == key {
			return g
		}
	}
	return nil
}

// Begin records that a run builds into the generation with key (before anything is
// written there, so that a folder the record does not name is never one of ours half built).
func (s *Store) Begin(key string) error {
	return s.BeginWith(key, nil)
}

// BeginWith is Begin that also records the named digests the key was made of (kept when
// the generation was already recorded with them).
func (s *Store) BeginWith(key string, parts map[string]string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	l, err := s.makeAndLock()
	if err != nil {
		return err
	}
	defer l.Release()
	if err := s.register(); err != nil {
		return err
	}
	if g := s.find(key); g != nil {
		if g.Parts != nil || parts == nil {
			return nil
		}
		g.Parts = parts
		return s.save()
	}
	s.rec.Generations = append(s.rec.Generations, &Generation{Key: key, Created: s.now().UTC(), Parts: parts})
	return s.save()
}

// Parts returns the named digests the generation with key was made of (nil when they
// were not recorded).
func (s *Store) Parts(key string) map[string]string {
	if g := s.find(key); g != nil {
		return g.Parts
	}
	return nil
}

// Steps returns the step records kept with the generation with key, when it passed.
func (s *Store) Steps(key string) map[string]json.RawMessage {
	if g := s.find(key); g != nil {
		return g.Steps
	}
	return nil
}

// Previous returns the generation to roll back to from the serving one: the newest other
// generation that passed the gate, whose step records are kept and whose folder is still
// on disk ("" when there is none).
func (s *Store) Previous() string {
	var best *Generation
	for _, g := range s.rec.Generations {
		if g.Key == s.Serving() || g.Passed.IsZero() || len(g.Steps) == 0 {
			continue
		}
		if fi, err := os.Stat(s.Path(g.Key)); err != nil || !fi.IsDir() {
			continue
		}
		if best == nil || g.Passed.After(best.Passed) {
			best = g
		}
	}
	if best == nil {
		return ""
	}
	return best.Key
}

// Passed records that the generation with key passed the gate, with the records of the
// steps that built it: it becomes the serving one and the "current" link is flipped to it
// (a new link renamed over the old one). Then the generations beyond the kept ones are
// removed.
func (s *Store) Passed(key string, steps map[string]json.RawMessage) (*Pruned, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	l, err := s.makeAndLock()
	if err != nil {
		return nil, err
	}
	defer l.Release()
	if err := s.register(); err != nil {
		return nil, err
	}
	g := s.find(key)
	if g == nil {
		g = &Generation{Key: key, Created: s.now().UTC()}
		s.rec.Generations = append(s.rec.Generations, g)
	}
	g.Passed, g.Steps = s.now().UTC(), steps
	s.rec.Current = key
	s.runs = ""
	s.rec.InPlace = nil
	if err := s.save(); err != nil {
		return nil, err
	}
	// A "current" that cannot be written does not stop the prune: the record says which
	// generation serves.
	lerr := s.link(key)
	rerr := s.linkRoots(key)
	p, perr := s.prune(false, "")
	return p, errors.Join(lerr, rerr, perr)
}
