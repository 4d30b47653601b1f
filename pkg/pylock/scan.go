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
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/safefile"
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
// same name and version wins). A distribution no record gives a wheel digest for is Local,
// and so is one installed without a wheel (an *.egg-info). What Scan cannot lock it
// refuses rather than leave out: a dist-info that is a symbolic link or no folder, a
// METADATA whose Name is no project name or whose Version is no PEP 440 version, a wheel
// record whose file name, version or URL disagree with the distribution (the lock is
// checked whole, as Parse checks it, before it is returned).
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
	dists, err := distributions(sitePackages)
	if err != nil {
		return nil, err
	}
	l := &Lock{Version: Version}
	for _, d := range dists {
		if d.egg {
			l.Local = append(l.Local, Local{Name: d.name, Version: d.version, Source: "unrecorded"})
			continue
		}
		di := filepath.Join(sitePackages, d.dir)
		var du directURL
		b, err := readBounded(filepath.Join(di, "direct_url.json"), maxDirectURL)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("reading %s/direct_url.json: %w", d.dir, err)
		default:
			if err := json.Unmarshal(b, &du); err != nil {
				return nil, fmt.Errorf("reading %s/direct_url.json: %w", d.dir, err)
			}
		}
		if du.DirInfo != nil && du.DirInfo.Editable {
			l.Local = append(l.Local, Local{Name: d.name, Version: d.version, Source: "editable", URL: cleanURL(du.URL)})
			continue
		}
		if du.sha256() == "" {
			du = byNV[nameVersion{d.name, d.version}]
		}
		sum, u := du.sha256(), cleanURL(du.URL)
		wheel := ""
		if pu, err := url.Parse(u); err == nil {
			wheel = path.Base(pu.Path)
		}
		if !hexRE.MatchString(sum) || !strings.HasSuffix(wheel, ".whl") {
			l.Local = append(l.Local, Local{Name: d.name, Version: d.version, Source: "unrecorded"})
			continue
		}
		p := Package{Name: d.name, Version: d.version, Wheel: wheel, SHA256: sum, URL: u}
		if err := p.check(); err != nil {
			return nil, fmt.Errorf("cannot lock %s (%s): %w; reinstall it from a wheel whose name, version and URL agree", d.dir, sitePackages, err)
		}
		l.Packages = append(l.Packages, p)
	}
	if err := l.Validate("of " + sitePackages); err != nil {
		return nil, err
	}
	return l, nil
}

// dist is one distribution of an environment, as Python's importlib.metadata finds it.
type dist struct {
	dir     string // its *.dist-info (or *.egg-info) in site-packages
	name    string // normalized
	version string
	egg     bool // installed without a wheel (*.egg-info)
}

// maxDistEntries bounds the entries of a site-packages folder read.
const maxDistEntries = 1 << 20

// distributions lists the distributions of the environment whose site-packages is site:
// each *.dist-info folder's METADATA (and each *.egg-info's PKG-INFO), every read bounded
// and none waiting on a FIFO. What Python would find but cannot be read as a distribution
// of this folder is refused, naming it: a dist-info that is a symbolic link (importlib
// follows it, so the package is installed, but what it points to is not this
// environment's), or that is no folder, a Name that is no PEP 508 project name, a Version
// that is no PEP 440 version, a project twice.
func distributions(site string) ([]dist, error) {
	f, err := os.OpenFile(site, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the environment: %w", err)
	}
	ents, err := f.ReadDir(maxDistEntries + 1)
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading the environment %s: %w", site, err)
	}
	if len(ents) > maxDistEntries {
		return nil, fmt.Errorf("the environment %s holds more than %d entries", site, maxDistEntries)
	}
	var out []dist
	seen := map[string]string{}
	for _, e := range ents {
		n := e.Name()
		egg := strings.HasSuffix(n, ".egg-info")
		if !egg && !strings.HasSuffix(n, ".dist-info") {
			continue
		}
		p := filepath.Join(site, n)
		meta := filepath.Join(p, "METADATA")
		switch t := e.Type(); {
		case t&fs.ModeSymlink != 0:
			return nil, fmt.Errorf("%s is a symbolic link: Python follows it and finds the package installed, but what it points to is not this environment's, and sglprov cannot lock it; replace the link with the folder (or reinstall the package with pip)", p)
		case egg && t.IsDir():
			meta = filepath.Join(p, "PKG-INFO")
		case egg && t.IsRegular():
			meta = p
		case !t.IsDir():
			return nil, fmt.Errorf("%s is not a folder: a broken install; reinstall the package with pip or remove it", p)
		}
		name, version, err := readMetadata(meta)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w; reinstall the package with pip, or remove it", p, err)
		}
		norm := Normalize(name)
		if prev, ok := seen[norm]; ok {
			return nil, fmt.Errorf("the environment %s holds %s twice (%s and %s): a broken install; reinstall it", site, norm, prev, n)
		}
		seen[norm] = n
		out = append(out, dist{dir: n, name: norm, version: version, egg: egg})
	}
	return out, nil
}

// readMetadata reads Name and Version from the header of a METADATA file (at most its first
// MiB, not waiting on a FIFO), refusing a Name that is no PEP 508 project name and a
// Version that is no PEP 440 version.
func readMetadata(p string) (name, version string, err error) {
	b, err := safefile.ReadPrefix(p, maxMetadataHeader)
	if err != nil {
		return "", "", err
	}
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(b))).ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return "", "", fmt.Errorf("reading its header: %w", err)
	}
	name, version = strings.TrimSpace(h.Get("Name")), strings.TrimSpace(h.Get("Version"))
	if !ValidName(name) {
		return "", "", fmt.Errorf("its Name %q is no project name (PEP 508: ASCII letters, digits, and \".\", \"-\", \"_\" inside)", name)
	}
	if _, ok := CanonicalVersion(version); !ok {
		return "", "", fmt.Errorf("%s's Version %q is no PEP 440 version", name, version)
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

// Write writes l to path (replaced whole, 0644), refusing a lock that Validate refuses:
// what sglprov writes, it reads back.
func Write(path string, l *Lock) error {
	if err := l.Validate(path); err != nil {
		return fmt.Errorf("not writing the lock: %w", err)
	}
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
