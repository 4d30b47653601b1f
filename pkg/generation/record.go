package generation

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// maxRecord bounds the record file read back.
const maxRecord = 16 << 20

// Open reads the record at recordPath of the generations kept in dir (a host path), keeping
// keep passed ones (at least 1). A missing record has no generations.
func Open(dir, recordPath string, keep int) (*Store, error) {
	if keep < 1 {
		keep = 1
	}
	s := &Store{dir: dir, record: recordPath, keep: keep, now: time.Now}
	b, err := safefile.ReadNoFollow(recordPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("reading the generations record: %w", err)
	case len(b) > maxRecord:
		return nil, fmt.Errorf("reading the generations record %s: larger than %d bytes", recordPath, maxRecord)
	}
	rec, err := parseRecord(b)
	if err != nil {
		return nil, fmt.Errorf("%w: reading the generations record %s: %v (move it away to start afresh)", exitcode.ErrUsage, recordPath, err)
	}
	s.rec = *rec
	return s, nil
}

// parseRecord reads a record and checks that it names generations as sglprov does: every
// key, the current one too, of the form Key returns (an empty key, or one with a path in
// it, would name the generations folder itself or a folder outside it).
func parseRecord(b []byte) (*Record, error) {
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	if rec.Current != "" {
		if err := CheckKey(rec.Current); err != nil {
			return nil, fmt.Errorf("current: %w", err)
		}
	}
	if rec.InPlace != nil && rec.InPlace.From != "" {
		if err := CheckKey(rec.InPlace.From); err != nil {
			return nil, fmt.Errorf("in_place.from: %w", err)
		}
	}
	for i, l := range rec.Links {
		if !filepath.IsAbs(l.Path) || filepath.Clean(l.Path) != l.Path || l.Path == "/" {
			return nil, fmt.Errorf("links[%d]: %q is not an absolute, clean path", i, l.Path)
		}
	}
	for i, g := range rec.Generations {
		if g == nil {
			return nil, fmt.Errorf("generations[%d]: empty", i)
		}
		if err := CheckKey(g.Key); err != nil {
			return nil, fmt.Errorf("generations[%d]: %w", i, err)
		}
	}
	return &rec, nil
}

// save writes the record (a new file renamed over the old one).
func (s *Store) save() error {
	if err := os.MkdirAll(filepath.Dir(s.record), 0o700); err != nil {
		return fmt.Errorf("creating the generations record's folder: %w", err)
	}
	b, err := json.MarshalIndent(&s.rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the generations record: %w", err)
	}
	if err := atomicfile.Write(s.record, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing the generations record: %w", err)
	}
	return nil
}
