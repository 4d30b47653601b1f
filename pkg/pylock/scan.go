package pylock

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/textproto"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
)

// maxMetadataHeader bounds the header of a METADATA file read (the description after it
// is not read); maxDirectURL a direct_url.json.
const (
	maxMetadataHeader = 1 << 20
	maxDirectURL      = 1 << 20
)

// report is the part of pip's installation report (pip install --report) a lock needs.
type report struct {
	Install []struct {
		Metadata struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"metadata"`
		DownloadInfo directURL `json:"download_info"`
	} `json:"install"`
}

// directURL is PEP 610's direct_url.json, as pip writes it in a dist-info and in a report.
type directURL struct {
	URL         string `json:"url"`
	ArchiveInfo *struct {
		Hash   string            `json:"hash"`
		Hashes map[string]string `json:"hashes"`
	} `json:"archive_info"`
	DirInfo *struct {
		Editable bool `json:"editable"`
	} `json:"dir_info"`
}

// sha256 is the archive's sha256 the record names, or "".
func (d directURL) sha256() string {
	if d.ArchiveInfo == nil {
		return ""
	}
	if h := d.ArchiveInfo.Hashes["sha256"]; h != "" {
		return strings.ToLower(h)
	}
	if alg, h, ok := strings.Cut(d.ArchiveInfo.Hash, "="); ok && alg == "sha256" {
		return strings.ToLower(h)
	}
	return ""
}

type nameVersion struct{ name, version string }

// Scan reads the environment whose site-packages folder is sitePackages: each *.dist-info
// names a distribution and its version; the wheel it came from, and that wheel's sha256,
// come from its direct_url.json (an install from a URL or a file) or from pip's reports
// (the files of reports, in the order the installs ran: a later report's entry for the
// same name and version wins). A distribution no record gives a wheel digest for is Local.
func Scan(sitePackages string, reports []string) (*Lock, error) {
	byNV := map[nameVersion]directURL{}
	for _, rp := range reports {
		b, err := readBounded(rp, maxLock)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading pip's report: %w", err)
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("reading pip's report %s: %w", rp, err)
		}
		for _, in := range r.Install {
			byNV[nameVersion{Normalize(in.Metadata.Name), in.Metadata.Version}] = in.DownloadInfo
		}
	}
	ents, err := os.ReadDir(sitePackages)
	if err != nil {
		return nil, fmt.Errorf("reading the environment: %w", err)
	}
	l := &Lock{Version: Version}
	seen := map[string]string{}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".dist-info") {
			continue
		}
		di := filepath.Join(sitePackages, e.Name())
		name, version, err := readMetadata(filepath.Join(di, "METADATA"))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", e.Name(), err)
		}
		n := Normalize(name)
		if prev, ok := seen[n]; ok {
			return nil, fmt.Errorf("the environment holds %s twice (%s and %s): a broken install; reinstall it", n, prev, e.Name())
		}
		seen[n] = e.Name()
		var du directURL
		if b, err := readBounded(filepath.Join(di, "direct_url.json"), maxDirectURL); err == nil {
			if err := json.Unmarshal(b, &du); err != nil {
				return nil, fmt.Errorf("reading %s/direct_url.json: %w", e.Name(), err)
			}
		}
		if du.DirInfo != nil && du.DirInfo.Editable {
			l.Local = append(l.Local, Local{Name: n, Version: version, Source: "editable", URL: cleanURL(du.URL)})
			continue
		}
		if du.sha256() == "" {
			du = byNV[nameVersion{n, version}]
		}
		sum, wheel := du.sha256(), path.Base(cleanURL(du.URL))
		if !hexRE.MatchString(sum) || !wheelRE.MatchString(wheel) {
			l.Local = append(l.Local, Local{Name: n, Version: version, Source: "unrecorded"})
			continue
		}
		l.Packages = append(l.Packages, Package{Name: n, Version: version, Wheel: wheel, SHA256: sum, URL: cleanURL(du.URL)})
	}
	return l, nil
}

// readMetadata reads Name and Version from the header of a METADATA file.
func readMetadata(p string) (name, version string, err error) {
	f, err := os.Open(p)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	h, err := textproto.NewReader(bufio.NewReader(io.LimitReader(f, maxMetadataHeader))).ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return "", "", fmt.Errorf("reading its header: %w", err)
	}
	name, version = strings.TrimSpace(h.Get("Name")), strings.TrimSpace(h.Get("Version"))
	if name == "" || !versionRE.MatchString(version) {
		return "", "", fmt.Errorf("no Name and Version in its header (%q, %q)", name, version)
	}
	return name, version, nil
}

// maxSysconfig bounds what the interpreter prints of its site-packages path.
const maxSysconfig = 64 << 10

// SitePackages asks python for its environment's site-packages folder (sysconfig's
// purelib), within 30 s.
func SitePackages(ctx context.Context, python string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
	var out, errb bytes.Buffer
	cmd.Stdout = &limitedBuffer{b: &out, left: maxSysconfig}
	cmd.Stderr = &limitedBuffer{b: &errb, left: maxSysconfig}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("asking %s for its site-packages: %w: %s", python, err, strings.TrimSpace(errb.String()))
	}
	p := strings.TrimSpace(out.String())
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("asking %s for its site-packages: it said %q", python, p)
	}
	return p, nil
}

// limitedBuffer keeps at most left bytes and drops the rest.
type limitedBuffer struct {
	b    *bytes.Buffer
	left int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	n := min(len(p), l.left)
	l.b.Write(p[:n])
	l.left -= n
	return len(p), nil
}

// Unrecorded names the distributions of l that came from no recorded wheel and that the
// venv did not bring itself (pip, setuptools, wheel): installed by hand, or before
// sglprov recorded pip's reports.
func (l *Lock) Unrecorded() []string {
	var out []string
	for _, x := range l.Local {
		if x.Source == "unrecorded" && x.Name != "pip" && x.Name != "setuptools" && x.Name != "wheel" {
			out = append(out, x.Name+" "+x.Version)
		}
	}
	return out
}

// Write writes l to path (replaced whole, 0644).
func Write(path string, l *Lock) error {
	b, err := l.Encode()
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, b, 0o644); err != nil {
		return fmt.Errorf("writing the lock %s: %w", path, err)
	}
	return nil
}

// MergeReport folds the pip report at from into the one at into (written whole, 0600) and
// removes from: an entry of from replaces into's entry for the same project, and into keeps
// the others. A re-run of a step whose requirements pip finds installed reports nothing to
// install; the wheels it recorded before stay recorded. A missing from changes nothing.
func MergeReport(into, from string) error {
	nb, err := readBounded(from, maxLock)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading pip's report: %w", err)
	}
	var add struct {
		Install []json.RawMessage `json:"install"`
	}
	if err := json.Unmarshal(nb, &add); err != nil {
		return fmt.Errorf("reading pip's report %s: %w", from, err)
	}
	var old struct {
		Install []json.RawMessage `json:"install"`
	}
	if ob, err := readBounded(into, maxLock); err == nil {
		_ = json.Unmarshal(ob, &old) // an unreadable old report is replaced
	}
	name := func(raw json.RawMessage) string {
		var e struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(raw, &e)
		return Normalize(e.Metadata.Name)
	}
	added := map[string]bool{}
	for _, e := range add.Install {
		added[name(e)] = true
	}
	merged := add.Install
	for _, e := range old.Install {
		if !added[name(e)] {
			merged = append(merged, e)
		}
	}
	b, err := json.Marshal(map[string]any{"version": "1", "install": merged})
	if err != nil {
		return fmt.Errorf("merging pip's report: %w", err)
	}
	if err := atomicfile.Write(into, b, 0o600); err != nil {
		return fmt.Errorf("writing pip's report: %w", err)
	}
	return os.Remove(from)
}
