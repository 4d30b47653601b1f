package generation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/sglprov/sglprov/pkg/atomicfile"
)

// linkRoots points each root's link at the generation with key: a new link renamed over
// the old one. A folder (or file) at the root that is not a link is the tree an in-place
// run built: it served until now and is renamed beside the root (ROOT.sglprov-inplace,
// recorded in MovedAside), never deleted.
func (s *Store) linkRoots(key string) error {
	var errs []error
	for _, root := range s.roots {
		if err := s.linkRoot(key, root); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Store) linkRoot(key string, root Root) error {
	target := filepath.Join(s.nodeDir, key, root.Sub)
	parent := filepath.Dir(root.Link)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("creating %s for the link to generation %s: %w", parent, Short(key), err)
	}
	tmp := filepath.Join(parent, fmt.Sprintf(".%s.sglprov-link.%d", filepath.Base(root.Link), os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("linking %s to generation %s: %w", root.Link, Short(key), err)
	}
	if fi, err := os.Lstat(root.Link); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
		aside, err := s.moveAside(root.Link)
		if err != nil {
			_ = os.Remove(tmp)
			return err
		}
		s.rec.MovedAside = append(s.rec.MovedAside, MovedAside{Root: root.Link, Path: aside, At: s.now().UTC()})
		if err := s.save(); err != nil {
			_ = os.Remove(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, root.Link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("linking %s to generation %s: %w", root.Link, Short(key), err)
	}
	if err := atomicfile.SyncDir(parent); err != nil {
		return err
	}
	i := slices.IndexFunc(s.rec.Links, func(l Link) bool { return l.Path == root.Link })
	if i < 0 {
		s.rec.Links = append(s.rec.Links, Link{Path: root.Link})
		i = len(s.rec.Links) - 1
	}
	s.rec.Links[i].Target = target
	return s.save()
}

// InPlaceServing returns since when, and from which generation, the moved-aside trees
// serve again (nil: they do not; see Record.InPlace).
func (s *Store) InPlaceServing() *InPlace { return s.rec.InPlace }

// Aside returns the folder last moved aside from the root whose link is at link (a host
// path), when it is still there as a folder.
func (s *Store) Aside(link string) (MovedAside, bool) {
	for i := len(s.rec.MovedAside) - 1; i >= 0; i-- {
		m := s.rec.MovedAside[i]
		if m.Root != link {
			continue
		}
		fi, err := os.Lstat(m.Path)
		if err != nil || !fi.IsDir() {
			return MovedAside{}, false
		}
		return m, true
	}
	return MovedAside{}, false
}

// Relink points each link at its Target (a new link renamed over the old one), under the
// generations folder's lock, and records the targets written. Each link must be the one
// sglprov wrote (a link whose target is the one recorded in Links): anything else there is
// left alone and is an error. On an error the links already changed are put back. It
// returns the links as they were, to undo it with.
func (s *Store) Relink(links []Link) ([]Link, error) {
	l, err := s.makeAndLock()
	if err != nil {
		return nil, err
	}
	defer l.Release()
	var prev []Link
	for _, want := range links {
		i := slices.IndexFunc(s.rec.Links, func(x Link) bool { return x.Path == want.Path })
		got, rerr := os.Readlink(want.Path)
		switch {
		case i < 0:
			err = fmt.Errorf("%s is no link sglprov recorded writing: it is left as it is", want.Path)
		case rerr != nil:
			err = fmt.Errorf("reading the link %s (sglprov wrote it to point at %s): %w", want.Path, s.rec.Links[i].Target, rerr)
		case got != s.rec.Links[i].Target:
			err = fmt.Errorf("the link %s points at %s, not at %s where sglprov pointed it: it is left as it is", want.Path, got, s.rec.Links[i].Target)
		default:
			err = s.relink(want.Path, want.Target)
		}
		if err != nil {
			for j := len(prev) - 1; j >= 0; j-- {
				_ = s.relink(prev[j].Path, prev[j].Target)
			}
			return nil, errors.Join(err, s.save())
		}
		prev = append(prev, Link{Path: want.Path, Target: got})
	}
	return prev, s.save()
}

// relink renames a new link to target over the link at p and records it.
func (s *Store) relink(p, target string) error {
	parent := filepath.Dir(p)
	tmp := filepath.Join(parent, fmt.Sprintf(".%s.sglprov-link.%d", filepath.Base(p), os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("linking %s to %s: %w", p, target, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("linking %s to %s: %w", p, target, err)
	}
	if err := atomicfile.SyncDir(parent); err != nil {
		return err
	}
	for i := range s.rec.Links {
		if s.rec.Links[i].Path == p {
			s.rec.Links[i].Target = target
		}
	}
	return nil
}

// InPlaceServes records that the moved-aside trees serve again (their roots' links point
// at them and their unit passed the gate): no generation serves, the "current" link is
// removed (it names the generation that serves), and every generation is kept as before.
// A generation that passes later serves again as usual.
func (s *Store) InPlaceServes() error {
	l, err := s.makeAndLock()
	if err != nil {
		return err
	}
	defer l.Release()
	s.rec.InPlace = &InPlace{Since: s.now().UTC(), From: s.rec.Current}
	s.rec.Current, s.runs = "", ""
	if err := s.save(); err != nil {
		return err
	}
	cur := filepath.Join(s.dir, CurrentLink)
	if fi, err := os.Lstat(cur); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if err := os.Remove(cur); err != nil {
			return fmt.Errorf("removing the link to the generation that served: %w", err)
		}
	}
	return nil
}

// removeLinks deletes the links at the roots that still point where sglprov last
// pointed them (a link or folder someone put there instead is left).
func (s *Store) removeLinks() error {
	var errs []error
	for _, l := range s.rec.Links {
		if got, err := os.Readlink(l.Path); err != nil || got != l.Target {
			continue
		}
		if err := os.Remove(l.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing the link %s: %w", l.Path, err))
		}
	}
	return errors.Join(errs...)
}

// moveAside renames what stands at p to the first free p.sglprov-inplace[-N].
func (s *Store) moveAside(p string) (string, error) {
	for i := 1; i <= 100; i++ {
		aside := p + ".sglprov-inplace"
		if i > 1 {
			aside += fmt.Sprintf("-%d", i)
		}
		if _, err := os.Lstat(aside); err == nil {
			continue
		}
		if err := os.Rename(p, aside); err != nil {
			return "", fmt.Errorf("moving the in-place tree %s aside to %s (so that the link to the serving generation can be put there): %w", p, aside, err)
		}
		return aside, nil
	}
	return "", fmt.Errorf("moving the in-place tree %s aside: %s.sglprov-inplace to -100 all exist; move them away", p, p)
}

// link points the "current" link at key.
func (s *Store) link(key string) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", s.dir, err)
	}
	cur := filepath.Join(s.dir, CurrentLink)
	if fi, err := os.Lstat(cur); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
		return fmt.Errorf("%s is not the link sglprov writes (it is a %s sglprov did not make): move it away so that the link to the serving generation can be written", cur, kindOf(fi))
	}
	tmp := filepath.Join(s.dir, fmt.Sprintf(".%s.%d", CurrentLink, os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Symlink(key, tmp); err != nil {
		return fmt.Errorf("linking the current generation: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, CurrentLink)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("linking the current generation: %w", err)
	}
	return atomicfile.SyncDir(s.dir)
}

// kindOf names what a file is, for messages.
func kindOf(fi fs.FileInfo) string {
	switch {
	case fi.IsDir():
		return "folder"
	case fi.Mode().IsRegular():
		return "file"
	}
	return "special file"
}
