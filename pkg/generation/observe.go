package generation

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/sglprov/sglprov/pkg/safefile"
)

// maxUnit bounds a unit file Observe reads.
const maxUnit = 1 << 20

// KeyIn returns the generation of the folder dir (a recipe's generations folder) that the
// unit text names ("" when it names none): the first path in it of the form
// .../NAME/KEY/... or .../NAME/KEY, NAME the folder's own name, KEY 16 hex digits.
func KeyIn(unit []byte, dir string) string {
	re := regexp.MustCompile(`/` + regexp.QuoteMeta(filepath.Base(dir)) + `/([0-9a-f]{16})(?:[/\s"']|$)`)
	if m := re.FindSubmatch(unit); m != nil {
		return string(m[1])
	}
	return ""
}

// Observe reads the units that serve the recipe now (the files a reboot or a restart
// starts: /etc/systemd/system/UNIT) and takes the generation they run as the serving one,
// whatever the record says: a switch killed between its promotion and the record, or a
// record written by hand, never makes a prune free the folder a server runs from. It
// returns the key the units run ("" when they name no generation of this folder that is on
// disk, or cannot be read); Mismatch says whether it differs from the record and Repair
// records it.
func (s *Store) Observe(unitFiles ...string) string {
	s.runs = ""
	for _, p := range unitFiles {
		b, err := safefile.ReadNoFollow(p)
		if err != nil || len(b) > maxUnit {
			continue
		}
		key := KeyIn(b, s.dir)
		if key == "" {
			continue
		}
		if fi, err := os.Stat(s.Path(key)); err != nil || !fi.IsDir() {
			continue
		}
		if key != s.rec.Current {
			s.runs = key
		}
		return key
	}
	return ""
}

// Mismatch returns, when the installed unit runs another generation than the record names
// (see Observe), the key the record names ("" for none) and the one that runs; ok is false
// when they agree.
func (s *Store) Mismatch() (recorded, runs string, ok bool) {
	if s.runs == "" {
		return "", "", false
	}
	return s.rec.Current, s.runs, true
}

// Repair records the generation the installed unit runs (Observe) as the serving one when
// the record names another: it is marked as passed (it was promoted; its step records stay
// as they were) and "current" and the roots' links flip to it. Nothing is deleted. It
// returns what it repaired, in one sentence ("" when nothing was to repair).
func (s *Store) Repair() (string, error) {
	recorded, runs, ok := s.Mismatch()
	if !ok {
		return "", nil
	}
	l, err := s.makeAndLock()
	if err != nil {
		return "", err
	}
	defer l.Release()
	was := "no generation"
	if recorded != "" {
		was = "generation " + Short(recorded)
	}
	msg := fmt.Sprintf("the generations record named %s as serving while the installed unit runs generation %s: recorded %s as serving", was, Short(runs), Short(runs))
	g := s.find(runs)
	if g == nil {
		g = &Generation{Key: runs, Created: s.now().UTC()}
		s.rec.Generations = append(s.rec.Generations, g)
	}
	if g.Passed.IsZero() {
		g.Passed = s.now().UTC()
	}
	s.rec.Current = runs
	s.rec.InPlace = nil
	if err := s.save(); err != nil {
		return "", err
	}
	s.runs = ""
	return msg, errors.Join(s.link(runs), s.linkRoots(runs))
}
