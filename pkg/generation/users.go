package generation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/safefile"
	"github.com/sglprov/sglprov/pkg/treelock"
)

// lock takes the generations folder's lock (treelock): another sglprov changing the
// generations there is an error that wraps exitcode.ErrLocked.
func (s *Store) lock() (*treelock.Lock, error) {
	return treelock.Acquire(context.Background(), s.dir, LockDir, "changing the generations in")
}

// makeAndLock creates the generations folder when it is not there and takes its lock.
func (s *Store) makeAndLock() (*treelock.Lock, error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", s.dir, err)
	}
	return s.lock()
}

// userFile is the file in LockDir that says this store's record lists generations here.
func (s *Store) userFile() string {
	abs, err := filepath.Abs(s.record)
	if err != nil {
		abs = s.record
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(s.dir, LockDir, "user-"+hex.EncodeToString(sum[:8]))
}

// register records, under the lock, that this store's record lists generations here.
func (s *Store) register() error {
	abs, err := filepath.Abs(s.record)
	if err != nil {
		return fmt.Errorf("naming the generations record: %w", err)
	}
	p := s.userFile()
	if b, err := safefile.ReadNoFollow(p); err == nil && string(b) == abs+"\n" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(p), err)
	}
	if err := atomicfile.Write(p, []byte(abs+"\n"), 0o600); err != nil {
		return fmt.Errorf("recording the state dir that uses %s: %w", s.dir, err)
	}
	return nil
}

// unregister removes this store's user file.
func (s *Store) unregister() error {
	if err := os.Remove(s.userFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", s.userFile(), err)
	}
	return nil
}

// users returns the records of the other state dirs that use this generations folder
// (their record files still there); with clean (under the lock, not in a dry run), user
// files whose record is gone are removed.
func (s *Store) users(clean bool) []string {
	entries, err := os.ReadDir(filepath.Join(s.dir, LockDir))
	if err != nil {
		return nil
	}
	mine := s.userFile()
	myRec, _ := os.Stat(s.record)
	var out []string
	for _, e := range entries {
		p := filepath.Join(s.dir, LockDir, e.Name())
		if !strings.HasPrefix(e.Name(), "user-") || p == mine || !e.Type().IsRegular() {
			continue
		}
		b, err := safefile.ReadNoFollow(p)
		if err != nil || len(b) > 4096 {
			continue
		}
		rec := strings.TrimSpace(string(b))
		fi, err := os.Stat(rec)
		if errors.Is(err, fs.ErrNotExist) {
			if clean {
				_ = os.Remove(p) // that state dir's record is gone: it uses nothing here
			}
			continue
		}
		if err != nil || myRec != nil && os.SameFile(fi, myRec) {
			continue
		}
		out = append(out, rec)
	}
	sort.Strings(out)
	return out
}

// anyKey stands, in others, for every key: another state dir's record that cannot be read.
const anyKey = "*"

// sharedWith returns the record of another state dir that lists key ("" when none does).
func sharedWith(others map[string]string, key string) string {
	if by, ok := others[key]; ok {
		return by
	}
	return others[anyKey]
}

// others returns the keys the other state dirs' records list, each with that record's
// path; a record there that cannot be read or is not of the form sglprov writes lists
// every key (anyKey).
func (s *Store) others() map[string]string {
	out := map[string]string{}
	for _, path := range s.users(false) {
		b, err := safefile.ReadNoFollow(path)
		if err != nil || len(b) > maxRecord {
			out[anyKey] = path
			continue
		}
		rec, err := parseRecord(b)
		if err != nil {
			// What it lists is unknown: every generation is left to it.
			out[anyKey] = path
			continue
		}
		for _, g := range rec.Generations {
			if _, ok := out[g.Key]; !ok {
				out[g.Key] = path
			}
		}
	}
	return out
}
