package pylock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// maxRecord bounds a dist-info's RECORD read; maxRecordRows the rows checked of one.
const (
	maxRecord     = 64 << 20
	maxRecordRows = 1 << 20
)

// Snapshot is what an environment held before a locked install: each distribution's
// version and dist-info, by normalized name.
type Snapshot map[string]dist

// TakeSnapshot reads the distributions of the environment whose site-packages is site.
func TakeSnapshot(site string) (Snapshot, error) {
	ds, err := distributions(site)
	if err != nil {
		return nil, err
	}
	s := Snapshot{}
	for _, d := range ds {
		s[d.name] = d
	}
	return s, nil
}

// Verify compares the environment whose site-packages is site, after a locked install,
// with l: each package of the lock is installed at the lock's version; where its
// dist-info records the archive it came from (direct_url.json), that archive's sha256 is
// the lock's; each file its RECORD lists with a hash (the wheel's own rows, which pip
// carries over; a script's rehashed after pip rewrote its first line) has that hash and
// size; and no distribution the lock does not name was installed or changed since before
// (nil: not checked). The first difference is an error naming what the lock says and
// what the environment holds.
func Verify(ctx context.Context, site string, l *Lock, before Snapshot) error {
	after, err := TakeSnapshot(site)
	if err != nil {
		return fmt.Errorf("checking the environment after the locked install: %w", err)
	}
	locked := map[string]bool{}
	for _, p := range l.Packages {
		locked[p.Name] = true
		d, ok := after[p.Name]
		if !ok {
			return fmt.Errorf("the lock names %s %s (%s), but the environment %s holds no %s after the locked install", p.Name, p.Version, p.Wheel, site, p.Name)
		}
		if d.egg || !SameVersion(d.version, p.Version) {
			return fmt.Errorf("the lock names %s %s (%s), but the environment holds %s %s (%s) after the locked install: the wheel installed is not the lock's; check the wheel at %s, or make the lock again with `sglprov pylock -f RECIPE` if the new one is wanted",
				p.Name, p.Version, p.Wheel, d.name, d.version, filepath.Join(site, d.dir), orDash(p.URL))
		}
		if err := checkDirectURL(site, d, p); err != nil {
			return err
		}
		if err := checkRecord(ctx, site, d); err != nil {
			return fmt.Errorf("the lock names %s %s: %w; a file changed after the install stays changed, since pip finds the version installed: remove the distribution (python -m pip uninstall %s) and apply again", p.Name, p.Version, err, p.Name)
		}
	}
	if before == nil {
		return nil
	}
	for name, d := range after {
		if locked[name] {
			continue
		}
		if b, ok := before[name]; !ok || b.version != d.version || b.dir != d.dir {
			return fmt.Errorf("the locked install left %s %s (%s) in the environment, which the lock does not name: a requirement the lock does not hold reached pip; remove it (pip uninstall %s) and check the lock", d.name, d.version, filepath.Join(site, d.dir), d.name)
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// checkDirectURL compares the archive a dist-info says it was installed from
// (direct_url.json, written by pip for a "name @ URL" install) with the lock's package.
func checkDirectURL(site string, d dist, p Package) error {
	b, err := readBounded(filepath.Join(site, d.dir, "direct_url.json"), maxDirectURL)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s after the locked install: %w", d.dir, err)
	}
	var du directURL
	if err := json.Unmarshal(b, &du); err != nil {
		return fmt.Errorf("checking %s after the locked install: direct_url.json: %w", d.dir, err)
	}
	if du.DirInfo != nil {
		return fmt.Errorf("the lock names %s %s (%s), but the environment's %s was installed from the folder %s", p.Name, p.Version, p.Wheel, d.dir, du.URL)
	}
	if sum := du.sha256(); sum != "" && sum != p.SHA256 {
		return fmt.Errorf("the lock names %s %s with sha256 %s, but the environment's %s came from %s, sha256 %s", p.Name, p.Version, p.SHA256, d.dir, orDash(cleanURL(du.URL)), sum)
	}
	return nil
}

// checkRecord checks each file the RECORD of d lists with a sha256: it is a regular file
// (not waited on), of the size and sha256 the row says.
func checkRecord(ctx context.Context, site string, d dist) error {
	rec := filepath.Join(site, d.dir, "RECORD")
	b, err := readBounded(rec, maxRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no RECORD: nothing to compare the files with
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", rec, err)
	}
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = -1
	for n := 0; ; n++ {
		row, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", rec, err)
		}
		if n >= maxRecordRows {
			return fmt.Errorf("%s lists more than %d files", rec, maxRecordRows)
		}
		if len(row) < 2 || !strings.HasPrefix(row[1], "sha256=") {
			continue // no hash (RECORD itself, or a file pip compiled) or another algorithm
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		want := strings.TrimPrefix(row[1], "sha256=")
		size := int64(-1)
		if len(row) > 2 && row[2] != "" {
			if size, err = strconv.ParseInt(row[2], 10, 64); err != nil || size < 0 {
				return fmt.Errorf("%s: the size %q of %s is no number", rec, row[2], row[0])
			}
		}
		p := row[0]
		if !filepath.IsAbs(p) {
			p = filepath.Join(site, p)
		}
		got, n, err := hashFile(p, size)
		if err != nil {
			return fmt.Errorf("checking %s (listed in %s): %w", p, rec, err)
		}
		if got != want || (size >= 0 && n != size) {
			return fmt.Errorf("%s has sha256=%s (%d bytes), its RECORD %s says sha256=%s (%s bytes): the installed file is not the wheel's", p, got, n, rec, want, orDash(strings.TrimSpace(row2(row))))
		}
	}
}

func row2(row []string) string {
	if len(row) > 2 {
		return row[2]
	}
	return ""
}

// hashFile is the urlsafe-base64 sha256 (as RECORD writes it) and the size of the regular
// file at p, opened without waiting on a FIFO; with size >= 0 it reads at most size+1
// bytes.
func hashFile(p string, size int64) (string, int64, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if !fi.Mode().IsRegular() {
		return "", 0, fmt.Errorf("%s is not a regular file", p)
	}
	var r io.Reader = f
	if size >= 0 {
		r = io.LimitReader(f, size+1)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", 0, fmt.Errorf("reading %s: %w", p, err)
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)), n, nil
}
