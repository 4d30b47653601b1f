// Package source is the source step kind: a source tree at a pinned commit, cloned with
// git (every user-given argument after "--"), or an archive whose sha256 is checked before
// it is unpacked.
// A tree is fetched into a temporary folder beside its destination and moved into place
// only when complete, so the destination is never half written.
package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	getter "github.com/hashicorp/go-getter/v2"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gitrepo"
	"github.com/sglprov/sglprov/pkg/netretry"
)

// Spec is the recipe body of a source step.
type Spec struct {
	// URL is where the tree comes from: a git source in go-getter's spelling
	// ("git::https://github.com/sgl-project/sglang?ref=<40-hex commit>", also
	// "git::file:///path/to/repo?ref=<commit>") or an archive URL (.tar.gz, .zip, ...).
	URL string `yaml:"url"`
	// SHA256 is the archive's sha256 (hex); required for archives, not used for git.
	SHA256 string `yaml:"sha256"`
	// Dest is the folder the tree is put in (a host path; a relative one is resolved against
	// the recipe's folder).
	Dest string `yaml:"dest"`
	// Ref is the commit, when the URL does not carry it as ?ref=.
	Ref string `yaml:"ref"`
}

// Kind returns the source step kind for the registry.
func Kind() engine.Kind {
	return engine.KindOf(New)
}

// New builds a source step from its spec. The ref is checked by Check (validate) and when
// the step is planned or run.
func New(name string, spec Spec) (*Step, error) {
	if spec.URL == "" {
		return nil, fmt.Errorf("source: url is required: %w", exitcode.ErrUsage)
	}
	if spec.Dest == "" {
		return nil, fmt.Errorf("source: dest is required: %w", exitcode.ErrUsage)
	}
	// git (and go-getter's getters) would read a URL or ref that starts with "-" as an
	// option (git::--upload-pack=...): refuse it when the recipe is validated.
	raw := spec.URL
	if i := strings.Index(raw, "::"); i > 0 && !strings.Contains(raw[:i], "/") {
		raw = raw[i+2:]
	}
	if strings.HasPrefix(strings.TrimSpace(raw), "-") {
		return nil, fmt.Errorf("source: url %q starts with \"-\", which git would read as an option: give the repository's URL: %w", redact(spec.URL), exitcode.ErrUsage)
	}
	// ssh would read a host or user that starts with "-" as an option (ssh://-oProxyCommand=...).
	if u, err := url.Parse(raw); err == nil && (strings.HasPrefix(u.Hostname(), "-") || u.User != nil && strings.HasPrefix(u.User.Username(), "-")) {
		return nil, fmt.Errorf("source: url %q has a host or user that starts with \"-\", which ssh would read as an option: %w", redact(spec.URL), exitcode.ErrUsage)
	}
	if strings.HasPrefix(strings.TrimSpace(spec.Ref), "-") {
		return nil, fmt.Errorf("source: ref %q starts with \"-\", which git would read as an option: recipes pin a 40-hex commit: %w", spec.Ref, exitcode.ErrUsage)
	}
	return &Step{name: name, spec: spec}, nil
}

var _ engine.SourcePinner = (*Step)(nil)

// SourcePin returns the source's URL and the commit it pins: ref, else the URL's ?ref=
// ("" when neither names one).
func (s *Step) SourcePin() (string, string) {
	if s.spec.Ref != "" {
		return s.spec.URL, s.spec.Ref
	}
	if u, err := url.Parse(strings.TrimPrefix(s.spec.URL, "git::")); err == nil {
		return s.spec.URL, u.Query().Get("ref")
	}
	return s.spec.URL, ""
}

// Check refuses, without the network, what plan and apply refuse in the url and ref: a git
// ref that is not a full commit, an archive without its sha256 (validate).
func (s *Step) Check(*engine.Env) error {
	_, err := s.resolve()
	return engine.AtField("url", err)
}

// Step fetches a source tree.
type Step struct {
	name string
	spec Spec
}

// markerName is the file an archive tree records its sha256 in.
const markerName = ".sglprov-source.json"

var (
	commitRE = regexp.MustCompile(`^[0-9a-fA-F]{40}$`)
	sha256RE = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
)

// resolved is a spec with its kind and ref worked out.
type resolved struct {
	git    bool
	src    string // the repository URL for git clone (git), or the go-getter source (archive)
	ref    string // lower-case commit (git), or the optional ref (archive)
	sha256 string // lower-case (archive)
}

// resolve works out whether the source is git or an archive and checks the ref or the
// checksum. Errors wrap exitcode.ErrUsage.
func (s *Step) resolve() (*resolved, error) {
	raw := s.spec.URL
	forced := ""
	if i := strings.Index(raw, "::"); i > 0 && !strings.Contains(raw[:i], "/") {
		forced, raw = raw[:i], raw[i+2:]
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("source url %q is not a URL: %w", redact(s.spec.URL), exitcode.ErrUsage)
	}
	isGit := forced == "git" || strings.HasSuffix(u.Path, ".git") ||
		(u.Host == "github.com" && len(strings.Split(strings.Trim(u.Path, "/"), "/")) == 2)
	if forced != "" && forced != "git" {
		return nil, fmt.Errorf("source url %q: getter %q is not supported (git:: or a plain archive URL): %w", redact(s.spec.URL), forced, exitcode.ErrUsage)
	}
	q := u.Query()
	if isGit {
		// git reads TRANSPORT::ADDRESS as a transport helper (fd::3 reads a file
		// descriptor and waits, ext:: runs a command): only git:: (go-getter's, stripped
		// above) is the recipe's; what follows it must be a URL or a path.
		if i := strings.Index(raw, "::"); i > 0 && !strings.Contains(raw[:i], "/") {
			return nil, fmt.Errorf("source url %q: %q is git's transport-helper syntax (TRANSPORT::ADDRESS), which runs a helper rather than fetching a repository; give git:: followed by an https, http, ssh, git or file URL (or a local path): %w",
				redact(s.spec.URL), raw[:i+2], exitcode.ErrUsage)
		}
		switch u.Scheme {
		case "", "http", "https", "ssh", "git", "file", "git+ssh", "ssh+git":
		default:
			return nil, fmt.Errorf("source url %q: git transport %q is not one a recipe may use; give an https, http, ssh, git or file URL (or a local path): %w",
				redact(s.spec.URL), u.Scheme, exitcode.ErrUsage)
		}
		ref := q.Get("ref")
		switch {
		case ref == "" && s.spec.Ref == "":
			return nil, fmt.Errorf("source %q has no ref: recipes pin a 40-hex commit (?ref=<commit> or ref:): %w", redact(s.spec.URL), exitcode.ErrUsage)
		case ref == "":
			ref = s.spec.Ref
		case s.spec.Ref != "" && !strings.EqualFold(s.spec.Ref, ref):
			return nil, fmt.Errorf("source %q: the url's ref %q and ref %q differ: %w", redact(s.spec.URL), ref, s.spec.Ref, exitcode.ErrUsage)
		}
		if !commitRE.MatchString(ref) {
			return nil, fmt.Errorf("source ref %q is not a commit: recipes pin a full 40-hex commit, not a branch or tag, so that every host builds the same tree: %w", ref, exitcode.ErrUsage)
		}
		ref = strings.ToLower(ref)
		if strings.Contains(strings.TrimPrefix(u.Path, "/"), "//") {
			return nil, fmt.Errorf("source %q: a subfolder of the repository (go-getter's //sub) is not supported: fetch the repository and point the later steps at the folder inside it: %w", redact(s.spec.URL), exitcode.ErrUsage)
		}
		for _, k := range []string{"depth", "sshkey"} {
			if q.Has(k) {
				return nil, fmt.Errorf("source %q: the %s= parameter is not supported (the step clones the repository whole and checks out the pinned commit; give an ssh key through ssh's own configuration): %w", redact(s.spec.URL), k, exitcode.ErrUsage)
			}
		}
		q.Del("ref")
		u.RawQuery = q.Encode()
		repo := u.String()
		if u.Scheme == "" && u.Host == "" && strings.HasPrefix(u.Path, "github.com/") {
			// go-getter's shorthand for a GitHub repository.
			repo = "https://" + repo
		}
		return &resolved{git: true, src: repo, ref: ref}, nil
	}
	if s.spec.SHA256 == "" {
		return nil, fmt.Errorf("archive source %q needs sha256: %w", redact(s.spec.URL), exitcode.ErrUsage)
	}
	if !sha256RE.MatchString(s.spec.SHA256) {
		return nil, fmt.Errorf("archive source %q: sha256 %q is not 64 hex digits: %w", redact(s.spec.URL), s.spec.SHA256, exitcode.ErrUsage)
	}
	sum := strings.ToLower(s.spec.SHA256)
	if q.Get("checksum") != "" {
		return nil, fmt.Errorf("archive source %q: give the checksum as sha256:, not in the url: %w", redact(s.spec.URL), exitcode.ErrUsage)
	}
	q.Set("checksum", "sha256:"+sum)
	u.RawQuery = q.Encode()
	return &resolved{src: u.String(), ref: s.spec.Ref, sha256: sum}, nil
}

// Fingerprint returns the ref (and, for an archive, its sha256); the engine adds the
// spec's text, URL included.
func (s *Step) Fingerprint(_ context.Context, _ *engine.Env) (map[string]string, error) {
	r, err := s.resolve()
	if err != nil {
		return nil, err
	}
	if r.git {
		return map[string]string{"ref": r.ref}, nil
	}
	return map[string]string{"ref": r.ref, "sha256": r.sha256}, nil
}

// Intact reports whether dest holds the pinned tree: for git, its HEAD is the ref (local
// changes are not this step's business); for an archive, its marker records the sha256.
func (s *Step) Intact(ctx context.Context, env *engine.Env) (bool, string, error) {
	r, err := s.resolve()
	if err != nil {
		return false, "", err
	}
	dest := env.Path(s.spec.Dest)
	if err := checkNotLink(dest); err != nil {
		return false, "", err
	}
	if _, err := os.Stat(dest); errors.Is(err, fs.ErrNotExist) {
		return false, "outputs changed: " + dest + " does not exist", nil
	} else if err != nil {
		return false, "", fmt.Errorf("checking %s: %w", dest, err)
	}
	if r.git {
		head, err := gitrepo.Head(ctx, dest)
		if err != nil {
			return false, "outputs changed: " + dest + " is not a git work tree", nil
		}
		if head != r.ref {
			return false, fmt.Sprintf("outputs changed: %s is at %s, not %s", dest, head, r.ref), nil
		}
		return true, "", nil
	}
	m, err := readMarker(dest)
	if err != nil {
		return false, "outputs changed: " + dest + " has no record of its archive", nil
	}
	if m.SHA256 != r.sha256 {
		return false, fmt.Sprintf("outputs changed: %s holds the archive with sha256 %s, not %s", dest, m.SHA256, r.sha256), nil
	}
	return true, "", nil
}

// Run fetches the tree into a temporary folder beside dest and moves it into place. A
// dest that holds another tree is replaced whole, in one rename where the kernel can
// exchange two folders.
func (s *Step) Run(ctx context.Context, env *engine.Env) error {
	r, err := s.resolve()
	if err != nil {
		return err
	}
	dest := env.Path(s.spec.Dest)
	if err := checkNotLink(dest); err != nil {
		return err
	}
	if !env.Force {
		if ok, _, err := s.Intact(ctx, env); err == nil && ok {
			env.Log.Info("source tree already at its pin", "dest", s.spec.Dest, "ref", r.ref)
			return nil
		}
	}
	if r.git {
		if _, err := exec.LookPath("git"); err != nil {
			return fmt.Errorf("fetching %s: the git command is needed: %w", redact(s.spec.URL), err)
		}
	}
	if err := checkReplaceable(ctx, dest, r.git); err != nil {
		return err
	}
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", parent, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dest)+".fetch-")
	if err != nil {
		return fmt.Errorf("creating a folder to fetch into: %w", err)
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "tree")

	env.Log.Info("fetching source", "url", redact(s.spec.URL), "dest", s.spec.Dest)
	if r.git {
		err = fetchGit(ctx, env, r, tree)
	} else {
		tree, err = fetchArchive(ctx, r, tree)
	}
	if err != nil {
		return fmt.Errorf("fetching %s: %w", redact(s.spec.URL), scrub(err, s.spec.URL))
	}
	if r.git {
		head, err := gitrepo.Head(ctx, tree)
		if err != nil {
			return fmt.Errorf("checking the fetched tree: %w", err)
		}
		if head != r.ref {
			return fmt.Errorf("the fetched tree is at %s, not %s", head, r.ref)
		}
	} else if err := writeMarker(tree, marker{URL: redact(s.spec.URL), SHA256: r.sha256}); err != nil {
		return err
	}
	if err := replace(tree, dest); err != nil {
		return err
	}
	env.Detail("ref", r.ref)
	if !r.git {
		env.Detail("sha256", r.sha256)
	}
	env.Log.Info("source tree in place", "dest", s.spec.Dest, "ref", r.ref)
	return nil
}

// Preflight refuses, when plan checks the host, a dest that is a symbolic link (see
// checkNotLink): plan says so before apply would.
func (s *Step) Preflight(_ context.Context, env *engine.Env, _ engine.CacheSlot) ([]string, *engine.DiskNeed, error) {
	return nil, nil, checkNotLink(env.Path(s.spec.Dest))
}

// checkNotLink refuses a dest that is a symbolic link. The step replaces its dest whole
// (a rename over it), which would put a real folder where the link was and leave the
// link's target at the old commit; following the link instead would replace a folder
// elsewhere that the recipe does not name. The folders above dest may be links.
func checkNotLink(dest string) error {
	fi, err := os.Lstat(dest)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return nil
	}
	target, rerr := os.Readlink(dest)
	if rerr != nil {
		target = "?"
	}
	return fmt.Errorf("source dest %s is a symbolic link (to %s): the step replaces its dest whole and would replace the link, not its target; set dest to the folder the link points to, or remove the link: %w",
		dest, target, exitcode.ErrUsage)
}

// checkReplaceable refuses to replace a dest that this kind of step did not make: a
// folder that is neither empty, nor a git work tree (git sources), nor marked with an
// archive's checksum (archive sources). A mistyped dest must not delete someone's data.
func checkReplaceable(ctx context.Context, dest string, git bool) error {
	entries, err := os.ReadDir(dest)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", dest, err)
	}
	if len(entries) == 0 {
		return nil
	}
	if git {
		if _, err := gitrepo.Head(ctx, dest); err == nil {
			return nil
		}
	} else if _, err := readMarker(dest); err == nil {
		return nil
	}
	return fmt.Errorf("%s exists and does not hold a source tree this step fetched; move it away or choose another dest", dest)
}

// fetchGit clones the repository into dst and checks out the commit. It runs git itself
// (go-getter's git getter passes the URL and the ref to git before any "--", where one
// that starts with "-" is read as an option). A clone that fails in a way a retry can help
// (a host name that does not resolve yet, a refused connection, a server error) is tried
// again under the one network retry policy, within the recipe's network.retry_for.
func fetchGit(ctx context.Context, env *engine.Env, r *resolved, dst string) error {
	p := netretry.Policy{Budget: env.NetworkRetryFor, Log: func(_ slog.Level, msg string, kv ...any) { env.Log.Info(msg, kv...) }}
	return p.Do(ctx, "git clone of "+redact(r.src), func() (netretry.Verdict, error) {
		if err := os.RemoveAll(dst); err != nil {
			return netretry.Verdict{}, fmt.Errorf("clearing %s for the clone: %w", dst, err)
		}
		err := gitrepo.Clone(ctx, r.src, dst, r.ref)
		if err != nil {
			err = scrub(err, r.src)
		}
		return netretry.ClassifyGit(err), err
	})
}

// fetchArchive downloads the archive, checks its sha256 (go-getter's checksum parameter,
// verified before anything is unpacked) and unpacks it into dst. When the archive holds
// one top folder (as GitHub's archives do), that folder is the tree.
func fetchArchive(ctx context.Context, r *resolved, dst string) (string, error) {
	c := &getter.Client{
		Getters: []getter.Getter{
			&getter.HttpGetter{XTerraformGetDisabled: true},
			&getter.FileGetter{},
		},
		Decompressors: getter.Decompressors,
	}
	req := &getter.Request{Src: r.src, Dst: dst, GetMode: getter.ModeDir, Copy: true}
	if _, err := c.Get(ctx, req); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(dst)
	if err != nil {
		return "", fmt.Errorf("reading the unpacked archive: %w", err)
	}
	if len(entries) == 1 && entries[0].IsDir() {
		return filepath.Join(dst, entries[0].Name()), nil
	}
	return dst, nil
}

// marker records where an archive tree came from.
type marker struct {
	URL    string `json:"url"`
	SHA256 string `json:"sha256"`
}

func readMarker(dir string) (marker, error) {
	var m marker
	b, err := os.ReadFile(filepath.Join(dir, markerName))
	if err != nil {
		return m, err
	}
	err = json.Unmarshal(b, &m)
	return m, err
}

func writeMarker(dir string, m marker) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, markerName), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("recording the archive's checksum: %w", err)
	}
	return nil
}

// replace puts the folder tree at dest. An existing dest is exchanged with tree in one
// step where the system can (renameat2 RENAME_EXCHANGE), else moved aside first; the old
// tree is then removed.
func replace(tree, dest string) error {
	_, err := os.Lstat(dest)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(tree, dest); err != nil {
			return fmt.Errorf("moving the fetched tree to %s: %w", dest, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", dest, err)
	}
	if err := exchange(tree, dest); err == nil {
		// tree now holds the old dest; the caller's temporary folder goes with it.
		return os.RemoveAll(tree)
	}
	old := tree + ".old"
	if err := os.Rename(dest, old); err != nil {
		return fmt.Errorf("moving the old tree %s aside: %w", dest, err)
	}
	if err := os.Rename(tree, dest); err != nil {
		if rerr := os.Rename(old, dest); rerr != nil {
			return fmt.Errorf("moving the fetched tree to %s: %w (and putting the old tree back: %v)", dest, err, rerr)
		}
		return fmt.Errorf("moving the fetched tree to %s: %w", dest, err)
	}
	return os.RemoveAll(old)
}

// scrub returns err with the URL's password (if any) replaced, since go-getter's errors
// quote the URL they were given.
func scrub(err error, raw string) error {
	if i := strings.Index(raw, "::"); i > 0 && !strings.Contains(raw[:i], "/") {
		raw = raw[i+2:]
	}
	u, perr := url.Parse(raw)
	if perr != nil || u.User == nil {
		return err
	}
	pass, ok := u.User.Password()
	if !ok || pass == "" || !strings.Contains(err.Error(), pass) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pass, "xxxxx"))
}

// redact removes a password from a URL, for logs and errors.
func redact(raw string) string {
	prefix := ""
	if i := strings.Index(raw, "::"); i > 0 && !strings.Contains(raw[:i], "/") {
		prefix, raw = raw[:i+2], raw[i+2:]
	}
	u, err := url.Parse(raw)
	if err != nil {
		// Not a URL: still hide whatever stands between "://" and "@".
		return prefix + userinfoRE.ReplaceAllString(raw, "${1}xxxxx@")
	}
	if u.User == nil {
		return prefix + raw
	}
	return prefix + u.Redacted()
}

var userinfoRE = regexp.MustCompile(`(://)[^/@]*@`)
