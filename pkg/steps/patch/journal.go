package patch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// stageDir is the one folder, at the top of the tree, where the step stages new file
// contents and keeps its journal while it writes. It is removed when the write is done;
// a run killed while writing leaves it, and the next run finishes from it.
const stageDir = ".sglprov-patch"

// journalName is the journal's name inside stageDir.
const journalName = "journal.json"

// pauseEnv names a file: when set, the step creates that file after its first rename and
// waits there for a minute, so that a test can kill it between two renames.
const pauseEnv = "SGLPROV_TEST_PATCH_PAUSE"

// Operations of a journal entry.
const (
	opWrite  = "write"
	opRemove = "remove"
	opChmod  = "chmod"
)

// journal lists every change of one write, written and fsynced before the first change:
// a run killed among the renames is finished from it by the next run.
type journal struct {
	Version int            `json:"version"`
	Changes []journalEntry `json:"changes"`
}

// journalEntry is one change of the tree: a staged file renamed over Path, Path removed,
// or its mode set. Pre and Post are the digests of Path's content before and after
// ("absent" for no file).
type journalEntry struct {
	Op     string      `json:"op"`
	Path   string      `json:"path"`
	Staged string      `json:"staged,omitempty"`
	Mode   fs.FileMode `json:"mode,omitempty"`
	Pre    string      `json:"pre"`
	Post   string      `json:"post"`
}

// write puts the files of t that differ from the disk in place; disk holds what the run
// already read of them from the disk (a file it lacks is read now). Every new content is
// first staged (written and fsynced) in stageDir, then the journal is written and fsynced;
// only then are the staged files renamed over their targets, files removed and modes set.
// A failure while staging leaves the tree as it was; a kill among the renames is finished
// by the next run (recoverJournal).
func write(root, step string, t, disk *tree) error {
	stage := filepath.Join(root, stageDir)
	if _, err := clearStage(stage); err != nil {
		return err
	}
	var j journal
	j.Version = 1
	for _, rel := range sortedKeys(t.files) {
		want := t.files[rel]
		have, err := disk.get(rel)
		if err != nil {
			return err
		}
		e := journalEntry{Path: rel, Pre: entryDigest(have), Post: entryDigest(want), Mode: want.perm}
		switch {
		case !want.exists && !have.exists:
			continue
		case !want.exists:
			e.Op = opRemove
		case have.exists && have.link == want.link && bytes.Equal(have.data, want.data) && have.perm == want.perm:
			continue
		case have.exists && !have.link && !want.link && bytes.Equal(have.data, want.data):
			e.Op = opChmod
		case want.link:
			e.Op, e.Staged = opWrite, strconv.Itoa(len(j.Changes))
			if err := os.MkdirAll(stage, 0o700); err != nil {
				return fmt.Errorf("creating %s: %w", stage, err)
			}
			if err := os.Symlink(string(want.data), filepath.Join(stage, e.Staged)); err != nil {
				_, _ = clearStage(stage)
				return fmt.Errorf("staging the symbolic link %s: %w", filepath.Join(root, rel), err)
			}
			if err := atomicfile.SyncDir(stage); err != nil {
				_, _ = clearStage(stage)
				return err
			}
		default:
			e.Op, e.Staged = opWrite, strconv.Itoa(len(j.Changes))
			if err := os.MkdirAll(stage, 0o700); err != nil {
				return fmt.Errorf("creating %s: %w", stage, err)
			}
			st, err := atomicfile.Stage(filepath.Join(stage, e.Staged), want.data, want.perm)
			if err != nil {
				_, _ = clearStage(stage)
				return err
			}
			// Stage wrote a temporary name; the journal names the final one.
			if err := st.Commit(); err != nil {
				_, _ = clearStage(stage)
				return err
			}
		}
		j.Changes = append(j.Changes, e)
	}
	if len(j.Changes) == 0 {
		_, err := clearStage(stage)
		return err
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the patch journal: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(stage, journalName), append(b, '\n'), 0o600); err != nil {
		_, _ = clearStage(stage)
		return fmt.Errorf("writing the patch journal: %w", err)
	}
	return finish(root, step, &j)
}

// finish carries out a journal's changes (those not yet done), fsyncs the folders it
// changed, and removes the stage folder, journal last. step names the step in the hint
// of an error.
func finish(root, step string, j *journal) error {
	stage := filepath.Join(root, stageDir)
	pause := os.Getenv(pauseEnv)
	dirs := map[string]bool{}
	for i, e := range j.Changes {
		p := filepath.Join(root, e.Path)
		cur, err := readEntry(root, e.Path) // refuses a path that leaves the tree
		if err != nil {
			return err
		}
		d := entryDigest(cur)
		if d != e.Pre && d != e.Post {
			return fmt.Errorf("finishing an interrupted patch write: %s changed since it was journalled; restore it (`sglprov apply --force %s` restores the series' files from git) and run again", p, step)
		}
		switch e.Op {
		case opWrite:
			if d == e.Post && cur.perm == e.Mode {
				continue
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return fmt.Errorf("creating %s: %w", filepath.Dir(p), err)
			}
			staged := filepath.Join(stage, e.Staged)
			if _, err := os.Lstat(staged); errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("finishing an interrupted patch write: the journal %s has %s written from its staged copy %s, which is gone, and %s is not written yet; restore the tree (`sglprov apply --force %s` restores the series' files from git; outside git restore them by hand and remove %s) and run again",
					filepath.Join(stage, journalName), p, staged, p, step, filepath.Join(stage, journalName))
			}
			if err := os.Rename(staged, p); err != nil {
				return fmt.Errorf("renaming the staged %s into place: %w", p, err)
			}
		case opRemove:
			if !cur.exists {
				continue
			}
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("removing %s: %w", p, err)
			}
		case opChmod:
			if err := os.Chmod(p, e.Mode); err != nil {
				return fmt.Errorf("setting the mode of %s: %w", p, err)
			}
		default:
			return fmt.Errorf("patch journal %s: unknown operation %q", filepath.Join(stage, journalName), e.Op)
		}
		dirs[filepath.Dir(p)] = true
		if i == 0 && pause != "" {
			_ = os.WriteFile(pause, nil, 0o600)
			time.Sleep(time.Minute)
		}
	}
	for _, d := range sortedKeys(dirs) {
		if err := atomicfile.SyncDir(d); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(stage, journalName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the patch journal: %w", err)
	}
	if _, err := clearStage(stage); err != nil {
		return err
	}
	return atomicfile.SyncDir(root)
}

// recoverJournal finishes a write that an earlier run left among its renames (its journal
// is there), or removes what a run killed while staging left (no journal: the tree was not
// touched). It says what it found ("" when the stage folder held nothing) and reports
// whether it finished a write. The caller holds the tree's lock.
func recoverJournal(root, step string) (found string, finished bool, err error) {
	stage := filepath.Join(root, stageDir)
	fi, err := os.Lstat(stage)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("checking %s: %w", stage, err)
	}
	if !fi.IsDir() {
		return "", false, fmt.Errorf("%s is not a folder the patch step made; remove it", stage)
	}
	b, err := safefile.ReadRegular(filepath.Join(stage, journalName), 16<<20)
	if errors.Is(err, fs.ErrNotExist) {
		n, err := clearStage(stage)
		if err != nil {
			return "", false, err
		}
		if n == 0 {
			return "", false, nil
		}
		return fmt.Sprintf("%d staged file(s) or merge folder(s) and no journal in %s: a run stopped while merging or staging, before it changed the tree; removed them", n, stage), false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading the patch journal: %w", err)
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil || j.Version != 1 {
		return "", false, fmt.Errorf("reading the patch journal %s: not a journal this sglprov wrote (%w); restore the tree with `sglprov apply --force %s` (outside git: restore it by hand and remove %s)", filepath.Join(stage, journalName), err, step, stage)
	}
	var paths []string
	done, missing := 0, 0
	untouched := true // every write and removal still to do: the tree is as before the write
	for _, e := range j.Changes {
		if !filepath.IsLocal(e.Path) || e.Staged != "" && !stagedNameRE.MatchString(e.Staged) {
			return "", false, fmt.Errorf("the patch journal names %q (staged as %q), a path outside the tree or the stage folder; remove %s", e.Path, e.Staged, filepath.Join(stage, journalName))
		}
		paths = append(paths, e.Path)
		d, err := fileDigest(root, e.Path)
		if err == nil && d == e.Post {
			done++
		}
		if e.Op != opChmod && (err != nil || d != e.Pre || d == e.Post) {
			untouched = false
		}
		if e.Op == opWrite {
			if _, err := os.Lstat(filepath.Join(stage, e.Staged)); errors.Is(err, fs.ErrNotExist) {
				missing++
			}
		}
	}
	found = fmt.Sprintf("the journal of an unfinished patch write in %s: %d change(s) (%s), %d already made", stage, len(j.Changes), strings.Join(paths, ", "), done)
	if missing > 0 && untouched {
		// Nothing was changed yet and the staged copies are gone: the journal cannot be
		// finished, and need not be; the series is applied afresh from the tree as it is.
		if _, err := clearStage(stage); err != nil {
			return found, false, err
		}
		return found + fmt.Sprintf("; %d staged cop(ies) gone, so dropped it: the tree was not changed, and the series is applied afresh", missing), false, nil
	}
	if err := finish(root, step, &j); err != nil {
		return found, false, fmt.Errorf("%s: %w", found, err)
	}
	return found + "; finished the rest", true, nil
}

// stagedNameRE matches the names write gives staged files.
var stagedNameRE = regexp.MustCompile(`^[0-9]+$`)

// dropJournal removes what an earlier run left in the stage folder, journal and all,
// without finishing it: a forced run restores the series' files from git instead. It says
// what it dropped ("" when there was nothing).
func dropJournal(root string) (string, error) {
	stage := filepath.Join(root, stageDir)
	found := ""
	if b, err := safefile.ReadRegular(filepath.Join(stage, journalName), 16<<20); err == nil {
		var j journal
		if json.Unmarshal(b, &j) == nil {
			var paths []string
			for _, e := range j.Changes {
				paths = append(paths, e.Path)
			}
			found = fmt.Sprintf("the journal of an unfinished patch write in %s: %d change(s) (%s)", stage, len(j.Changes), strings.Join(paths, ", "))
		} else {
			found = "a patch journal in " + stage + " that this sglprov cannot read"
		}
	}
	n, err := clearStage(stage)
	if err != nil || n == 0 {
		return "", err
	}
	if found == "" {
		found = fmt.Sprintf("%d staged file(s) or merge folder(s) and no journal in %s", n, stage)
	}
	return found, nil
}

// litterRE matches the temporary files that atomicfile.Stage names after their target
// (".NAME.tmp-NNN"), which runs before the stage folder left beside the patched files.
var litterRE = regexp.MustCompile(`^\..+\.tmp-[0-9]+$`)

// removeLitter removes the temporary files an earlier run killed while staging left beside
// the files the series touches, and reports how many it removed.
func removeLitter(root string, paths []string) int {
	n := 0
	seen := map[string]bool{}
	for _, rel := range paths {
		dir, base := filepath.Split(filepath.Join(root, rel))
		entries, err := os.ReadDir(dir)
		if err != nil || seen[dir+base] {
			continue
		}
		seen[dir+base] = true
		prefix := "." + base + ".tmp-"
		for _, e := range entries {
			name := e.Name()
			if e.Type().IsRegular() && len(name) > len(prefix) && name[:len(prefix)] == prefix && litterRE.MatchString(name) {
				if os.Remove(filepath.Join(dir, name)) == nil {
					n++
				}
			}
		}
	}
	return n
}
