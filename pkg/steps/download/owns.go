package download

import (
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/ownership"
)

// manifest is what the step wrote into its dest, kept in its record from run to run: the
// only files and folders sglprov remove --weights and gc may delete there.
type manifest struct {
	// Dest is the host path of the folder Wrote and Made are relative to.
	Dest string `json:"dest,omitempty"`
	// Wrote are the files (and hf-cache links) the step wrote, '/'-separated, sorted.
	Wrote []string `json:"wrote,omitempty"`
	// Made are the folders the step made ("." is dest itself), sorted.
	Made []string `json:"made,omitempty"`
	// Dev and Ino identify dest as the step found or made it.
	Dev uint64 `json:"dev,omitempty"`
	Ino uint64 `json:"ino,omitempty"`
	// Listed is set by every version that keeps the manifest (a record without it is an
	// older version's, which listed nothing).
	Listed bool `json:"listed,omitempty"`
}

// Owns names what the step wrote into its dest (engine.Owner): the files and the folders
// it made, which sglprov remove --weights deletes (the folders when empty) and whose part
// files gc frees. A step that neither wrote nor verified anything there owns nothing; a record of a version that
// kept no list names the folder with nothing listed, and nothing in it is deleted.
func (s *Step) Owns(env *engine.Env) []engine.Owned {
	rec, ok := s.loadRecord(env)
	if !ok {
		return nil
	}
	top := env.Path(s.spec.Dest)
	m := rec.Owned
	if !m.Listed {
		if len(rec.Files) == 0 {
			return nil
		}
		return []engine.Owned{{Kind: engine.OwnedWeights, Path: top}}
	}
	// A dest the step verified files in but wrote nothing to (another recipe's download)
	// is still one it uses: nothing of it is listed, so nothing is deleted for it, and
	// another recipe's remove keeps the folder while this one is on the node.
	if m.Dest != top || len(m.Wrote) == 0 && len(m.Made) == 0 && len(rec.Files) == 0 {
		return nil
	}
	return []engine.Owned{{Kind: engine.OwnedWeights, Path: top, Files: m.Wrote, Dirs: m.Made, Listed: true, Dev: m.Dev, Ino: m.Ino, Parts: s.partFiles(rec)}}
}

// partFiles returns the part files (relative to dest) the step's download keeps for the
// files it lists while they are not complete: the only part files gc and remove free in
// its dest (another run's downloads into the same dest, of other files, are not its).
func (s *Step) partFiles(rec record) []string {
	out := make([]string, 0, len(rec.Expected))
	for _, f := range rec.Expected {
		out = append(out, s.topRel(rec.Commit, filepath.ToSlash(fetch.PartPath("", f))))
	}
	slices.Sort(out)
	return out
}

// carryManifest returns the manifest this run starts from: the last run's when it was
// of the same dest, or an empty one. An older version's record lists only the files it
// verified, which may be files it found there (a user's, another recipe's): none of them is
// taken as written by sglprov; only what this and later runs write is listed.
func (s *Step) carryManifest(top string, old record, hadOld bool) manifest {
	m := manifest{Dest: top, Listed: true}
	if hadOld && old.Owned.Listed && old.Owned.Dest == top {
		m = old.Owned
	}
	if m.Ino == 0 {
		m.Dev, m.Ino = ownership.Identify(top)
	}
	return m
}

// add records rel (relative to dest) as written by the step.
func (m *manifest) add(rel string) {
	if i, found := slices.BinarySearch(m.Wrote, rel); !found {
		m.Wrote = slices.Insert(m.Wrote, i, rel)
	}
}

// wrote records rel, a path relative to dest, as written (relink and toBlobs call it).
func (m *manifest) wrote(rel string) { m.add(rel) }

// made records the folders of dirs (relative to dest) that exist now: the step made them.
func (m *manifest) made(top string, dirs []string) {
	for _, d := range dirs {
		if fi, err := os.Lstat(filepath.Join(top, filepath.FromSlash(d))); err != nil || !fi.IsDir() {
			continue
		}
		if i, found := slices.BinarySearch(m.Made, d); !found {
			m.Made = slices.Insert(m.Made, i, d)
		}
	}
	if m.Ino == 0 {
		m.Dev, m.Ino = ownership.Identify(top)
	}
}

// topRel is the path, relative to dest, of a file whose path rel is relative to the run's
// root (the snapshot folder of commit with the hf-cache layout).
func (s *Step) topRel(commit, rel string) string {
	if !s.hfCache() {
		return rel
	}
	return path.Join(repoFolder(s.spec.HF.Repo), "snapshots", commit, rel)
}

// missingDirs returns the folders, relative to top, that the run may make and that are
// not there yet: dest itself, its part-file folder, and the folders the files go in (with
// the hf-cache layout also the repository's blobs, snapshots and refs folders).
func (s *Step) missingDirs(top, commit string, files []fetch.File) []string {
	want := map[string]bool{".": true, fetch.WorkDir: true}
	addParents := func(rel string) {
		for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
			want[d] = true
		}
	}
	for _, f := range files {
		addParents(s.topRel(commit, f.Path))
	}
	if s.hfCache() {
		repo := repoFolder(s.spec.HF.Repo)
		addParents(path.Join(repo, "blobs", "x"))
		addParents(path.Join(repo, "refs", s.revision(), "x"))
		addParents(path.Join(repo, "snapshots", commit, "x"))
	}
	var out []string
	for d := range want {
		if _, err := os.Lstat(filepath.Join(top, filepath.FromSlash(d))); err != nil && os.IsNotExist(err) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// noteWritten records the files of missing (not at dest when the run began) that are
// there now: the run wrote them.
func (s *Step) noteWritten(top string, rec *record, missing []fetch.File) {
	for _, f := range missing {
		rel := s.topRel(rec.Commit, f.Path)
		if _, err := os.Lstat(filepath.Join(top, filepath.FromSlash(rel))); err == nil {
			rec.Owned.add(rel)
		}
	}
}
