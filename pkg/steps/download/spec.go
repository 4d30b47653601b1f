// Package download is the download step kind: files from the Hugging Face hub (a repository
// at a pinned revision, filtered by include/exclude patterns, checked against the hub's
// sha256) or from plain URLs with a sha256 each, fetched in parallel and resumably into a
// destination folder, then checked as safetensors weights.
package download

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/hub"
	"github.com/sglprov/sglprov/pkg/ownership"
	"github.com/sglprov/sglprov/pkg/redact"
)

// Spec is a download step's recipe body. Exactly one of HF and Files is set.
type Spec struct {
	// Dest is the destination folder (a host path; a relative one is resolved against the
	// recipe's folder).
	Dest string `yaml:"dest"`
	// HF names a hub repository to download.
	HF *HFSpec `yaml:"hf"`
	// Files lists plain URLs to download, each with its sha256.
	Files []FileSpec `yaml:"files"`
	// FilesAtOnce is how many files download at the same time (0: the downloader's default).
	FilesAtOnce int `yaml:"files_at_once"`
	// Connections is the number of parallel ranged connections per large file (0: default).
	Connections int `yaml:"connections"`
	// StallTimeout is how long a connection may receive nothing before it is retried,
	// e.g. "60s" ("": default). There is no total timeout.
	StallTimeout string `yaml:"stall_timeout"`
	// Retries bounds the downloads again of a file with a bad digest (0: the default, one
	// more; negative: none, and no retry of a failing request either).
	Retries int `yaml:"retries"`
	// Layout is how dest holds the files: "files" (the default: dest/PATH) or "hf-cache"
	// (huggingface_hub's cache: dest/models--ORG--NAME/{blobs,snapshots/COMMIT,refs}, the
	// snapshot's files links to the blobs; for hf only).
	Layout string `yaml:"layout"`
	// NoProgressTimeout is the retry budget of each file, e.g. "10m" ("": 10m): a failing
	// request is retried for as long as the file received a byte within this long; a file
	// that receives none for this long fails alone while the others finish.
	NoProgressTimeout string `yaml:"no_progress_timeout"`
}

// HFSpec names a hub repository and which of its files to download.
type HFSpec struct {
	// Repo is the repository id, "namespace/name".
	Repo string `yaml:"repo"`
	// Revision is a branch, tag or commit ("": main); a 40-hex commit pins the download.
	Revision string `yaml:"revision"`
	// Include lists glob patterns of files to download (all when empty); a pattern matches
	// a file's base name or its full path, and "**" matches across folders.
	Include []string `yaml:"include"`
	// Exclude lists glob patterns of files not to download.
	Exclude []string `yaml:"exclude"`
	// Endpoint is the hub's URL ("": HF_ENDPOINT, else https://huggingface.co).
	Endpoint string `yaml:"endpoint"`
	// TokenFile is a host file holding the hub token ("": HF_TOKEN, else the usual files); a
	// relative one is resolved against the recipe's folder.
	TokenFile string `yaml:"token_file"`
}

// FileSpec is one plain URL to download.
type FileSpec struct {
	// URL is where the file comes from (http or https).
	URL string `yaml:"url"`
	// SHA256 is the file's sha256, hex.
	SHA256 string `yaml:"sha256"`
	// Path is the file's path under Dest ("": the URL's last path element).
	Path string `yaml:"path"`
	// Size is the file's size in bytes, when known (0: unknown).
	Size int64 `yaml:"size"`
}

// Kind returns the download step kind.
func Kind() engine.Kind {
	return engine.KindOf(func(_ string, s Spec) (*Step, error) { return New(s) })
}

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// New checks spec and builds the step.
func New(spec Spec) (*Step, error) {
	spec.Files = append([]FileSpec(nil), spec.Files...)
	if err := spec.check(); err != nil {
		return nil, fmt.Errorf("download: %w: %w", exitcode.ErrUsage, err)
	}
	st := &Step{spec: spec, getenv: os.Getenv}
	if spec.StallTimeout != "" {
		d, _ := time.ParseDuration(spec.StallTimeout)
		st.stall = d
	}
	if spec.NoProgressTimeout != "" {
		d, _ := time.ParseDuration(spec.NoProgressTimeout)
		st.noProgress = d
	}
	return st, nil
}

func (s *Spec) check() error {
	if strings.TrimSpace(s.Dest) == "" {
		return fmt.Errorf("dest is required")
	}
	if filepath.IsAbs(s.Dest) && ownership.SystemFolder("", s.Dest) {
		return fmt.Errorf("dest %q is a system folder, which holds what sglprov did not write (remove --weights deletes what the step writes there); name a folder of its own, such as /var/lib/sglprov/models/NAME", s.Dest)
	}
	if (s.HF == nil) == (len(s.Files) == 0) {
		return fmt.Errorf("exactly one of hf and files is required")
	}
	if s.FilesAtOnce < 0 || s.Connections < 0 {
		return fmt.Errorf("files_at_once and connections must not be negative")
	}
	if s.StallTimeout != "" {
		d, err := time.ParseDuration(s.StallTimeout)
		if err != nil || d <= 0 {
			return fmt.Errorf("stall_timeout %q: want a positive duration such as 60s", s.StallTimeout)
		}
	}
	switch s.Layout {
	case "", LayoutFiles:
	case LayoutHFCache:
		if s.HF == nil {
			return fmt.Errorf("layout %q is for hf downloads: files have no repository to lay out", s.Layout)
		}
	default:
		return fmt.Errorf("layout %q: want %q or %q", s.Layout, LayoutFiles, LayoutHFCache)
	}
	if s.NoProgressTimeout != "" {
		d, err := time.ParseDuration(s.NoProgressTimeout)
		if err != nil || d <= 0 {
			return fmt.Errorf("no_progress_timeout %q: want a positive duration such as 10m", s.NoProgressTimeout)
		}
	}
	if s.HF != nil {
		return s.HF.check()
	}
	return s.checkFiles()
}

// check checks a hub download's repository, patterns and endpoint.
func (h *HFSpec) check() error {
	if err := hub.CheckRepo(h.Repo); err != nil {
		return fmt.Errorf("hf.repo: %w", err)
	}
	if err := hub.CheckPatterns(h.Include); err != nil {
		return fmt.Errorf("hf.include: %w", err)
	}
	if err := hub.CheckPatterns(h.Exclude); err != nil {
		return fmt.Errorf("hf.exclude: %w", err)
	}
	if h.Endpoint != "" {
		u, err := url.Parse(h.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("hf.endpoint %q: want an http(s) URL", redact.URL(h.Endpoint))
		}
	}
	return nil
}

// checkFiles checks the listed files: http(s) URLs, sha256 digests (lowered), paths
// (the URL's base name unless set) named once, sizes.
func (s *Spec) checkFiles() error {
	seen := map[string]bool{}
	for i := range s.Files {
		f := &s.Files[i]
		u, err := url.Parse(f.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("files[%d].url %q: want an http(s) URL", i, redact.URL(f.URL))
		}
		if !sha256RE.MatchString(strings.ToLower(f.SHA256)) {
			return fmt.Errorf("files[%d].sha256 %q: want 64 hex digits", i, f.SHA256)
		}
		f.SHA256 = strings.ToLower(f.SHA256)
		if f.Path == "" {
			f.Path = path.Base(u.Path)
		}
		if err := hub.CheckName(f.Path); err != nil {
			return fmt.Errorf("files[%d].path: %w", i, err)
		}
		if err := checkNotWorkDir(f.Path); err != nil {
			return fmt.Errorf("files[%d].path: %w", i, err)
		}
		if seen[f.Path] {
			return fmt.Errorf("files[%d].path %q: named twice", i, f.Path)
		}
		seen[f.Path] = true
		if f.Size < 0 {
			return fmt.Errorf("files[%d].size must not be negative", i)
		}
	}
	return nil
}

// checkNotWorkDir refuses a file path inside the folder of dest that holds the part files.
func checkNotWorkDir(p string) error {
	if first, _, _ := strings.Cut(p, "/"); first == fetch.WorkDir {
		return fmt.Errorf("%q is inside %s/, the folder of dest that holds the part files; no downloaded file may be there", p, fetch.WorkDir)
	}
	return nil
}

// Step is a download step.
type Step struct {
	spec       Spec
	stall      time.Duration
	noProgress time.Duration

	// hashed holds the files this process has already hashed and found right, with
	// their stat then: Run does not hash again what Intact just did.
	hashed map[string]fileRecord

	// getenv reads the environment (tests replace it).
	getenv func(string) string
	// client carries the requests (nil: the defaults of hub and fetch).
	client *http.Client
	// freeSpace replaces the downloader's free-space check (tests).
	freeSpace func(string) (uint64, error)
	// retryWait is the first wait between retries of hub API requests (0: the default).
	retryWait time.Duration
	// dnsSaid is set once a hub client of this step logged that the hub's host name does
	// not resolve: plan's fingerprint and preflight each make a client, and one line says it.
	dnsSaid atomic.Bool
	// minRateWindow is the window of the fleet cache's minimum rate (0: fetch's default).
	minRateWindow time.Duration
}
