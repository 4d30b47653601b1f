package pylock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/sglprov/sglprov/pkg/cache"
)

// MismatchError is a wheel whose bytes are not the ones the lock names.
type MismatchError struct {
	Wheel, Want, Got string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("wheel %s: its sha256 is %s, the lock says %s (a wheel that differs from the lock is refused; make the lock again with `sglprov pylock -f RECIPE` if the new one is wanted)", e.Wheel, e.Got, e.Want)
}

// VerifyWheels checks that dir holds every wheel of l with the lock's sha256. It returns
// the packages whose wheel is not there; a wheel that is there with other bytes is a
// *MismatchError.
func VerifyWheels(l *Lock, dir string) (missing []Package, err error) {
	for _, p := range l.Packages {
		sum, _, err := cache.FileSHA256(filepath.Join(dir, p.Wheel))
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, p)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("checking the wheels: %w", err)
		}
		if sum != p.SHA256 {
			return nil, &MismatchError{Wheel: p.Wheel, Want: p.SHA256, Got: sum}
		}
	}
	return missing, nil
}

// InstallOptions says where Install takes the wheels from.
type InstallOptions struct {
	// WheelDir, when set, is a folder of the lock's wheels (checked against the lock
	// first); pip then reads no package index (--no-index --find-links).
	WheelDir string
	// PipArgs are added to pip's arguments when there is no WheelDir (the recipe's
	// --index-url or --extra-index-url): the wheels come from the index, checked by pip's
	// --require-hashes.
	PipArgs []string
	// ByURL, when there is no WheelDir, takes each wheel from the URL the lock records for
	// it (the file the resolving node installed) rather than by name from the index.
	ByURL bool
	// Env is the environment of pip (default os.Environ()).
	Env []string
	// Out receives pip's output (default: discarded); its last lines are in the error.
	Out io.Writer
}

// Install installs exactly the packages of l into the environment of python: pip install
// --require-hashes --no-deps -r of l's requirements, written from l's checked fields only
// (Validate). A wheel that is not the lock's is refused: by VerifyWheels (both digests
// named) for a wheel folder, by pip's hash check (which names both too) for the index.
// After pip, the environment is compared with the lock (Verify): a distribution whose
// version, archive or files differ from the lock's, or one the lock does not name that
// the install added or changed, fails the install, naming both.
func Install(ctx context.Context, python string, l *Lock, opt InstallOptions) error {
	reqs, err := l.Requirements(opt.ByURL && opt.WheelDir == "")
	if err != nil {
		return err
	}
	if len(l.Packages) == 0 {
		return nil
	}
	site, err := SitePackages(ctx, python)
	if err != nil {
		return err
	}
	before, err := TakeSnapshot(site)
	if err != nil {
		return fmt.Errorf("reading the environment before the locked install: %w", err)
	}
	args := []string{"-m", "pip", "install", "--require-hashes", "--no-deps", "--disable-pip-version-check"}
	if opt.WheelDir != "" {
		missing, err := VerifyWheels(l, opt.WheelDir)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return fmt.Errorf("the folder %s lacks %d wheels of the lock (%s first)", opt.WheelDir, len(missing), missing[0].Wheel)
		}
		args = append(args, "--no-index", "--find-links", opt.WheelDir)
	} else {
		args = append(args, opt.PipArgs...)
	}
	tmp, err := os.CreateTemp("", "sglprov-lock-*.txt")
	if err != nil {
		return fmt.Errorf("writing the lock's requirements: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(reqs); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the lock's requirements: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the lock's requirements: %w", err)
	}
	args = append(args, "-r", tmp.Name())
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = opt.Env
	tail := &tailWriter{max: 8 << 10}
	var out io.Writer = tail
	if opt.Out != nil {
		out = io.MultiWriter(opt.Out, tail)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("installing the locked environment (%s -m pip install --require-hashes --no-deps): %w\n%s", python, err, tail.String())
	}
	return Verify(ctx, site, l, before)
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}
