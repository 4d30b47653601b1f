package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/sglprov/sglprov/pkg/safefile"
)

// BuiltinPrefix marks a recipe path that names a file shipped inside the binary
// ("builtin:patches/sglang/<commit>/series"), so that a recipe copied alone onto a node
// still finds its patches and templates.
const BuiltinPrefix = "builtin:"

// CheckPermissions refuses a file that someone other than root or the invoking user owns
// or can write, or that lies in a folder such a user can write (as sshd's StrictModes
// does; see safefile.Owners.Check): anyone who can change a recipe, patch or template can
// run commands as root.
func CheckPermissions(p string) error {
	err := safefile.Invoker(os.Getenv).Check(p)
	if errors.Is(err, safefile.ErrUntrusted) {
		return fmt.Errorf("%w: %v (or pass --insecure-permissions)", ErrUsage, err)
	}
	return err
}

// ReadTrusted reads a recipe file on disk: only a regular file (a FIFO or device is refused
// at once, exit 2), of at most limit bytes when limit > 0.
func ReadTrusted(p string, limit int64) ([]byte, error) {
	b, err := safefile.ReadRegular(p, limit)
	if errors.Is(err, safefile.ErrNotRegular) || errors.Is(err, safefile.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	return b, err
}

// ReadRecipeFile reads a file the recipe names (a patch series or patch, a unit template):
// "builtin:NAME" from the files shipped in the binary, anything else relative to the
// recipe's folder. A file on disk that is not a regular file is refused; one that other
// users own or can write too, unless the run was started with --insecure-permissions. It
// returns the data and the resolved name.
func (e *Env) ReadRecipeFile(p string) ([]byte, string, error) {
	if name, ok := strings.CutPrefix(p, BuiltinPrefix); ok {
		if e.Builtin == nil {
			return nil, p, fmt.Errorf("%w: %s: this build ships no files", ErrUsage, p)
		}
		b, err := fs.ReadFile(e.Builtin, path.Clean(name))
		if err != nil {
			return nil, p, fmt.Errorf("%w: reading shipped file %s: %v", ErrUsage, p, err)
		}
		return b, p, nil
	}
	full := e.RecipePath(p)
	if !e.InsecurePermissions {
		if err := CheckPermissions(full); err != nil {
			return nil, full, err
		}
	}
	b, err := ReadTrusted(full, 0)
	if err != nil {
		return nil, full, err
	}
	return b, full, nil
}

// JoinRecipePath names a file beside another recipe file (a patch beside its series),
// keeping the builtin: prefix.
func JoinRecipePath(beside, name string) string {
	if rest, ok := strings.CutPrefix(beside, BuiltinPrefix); ok {
		return BuiltinPrefix + path.Join(path.Dir(rest), name)
	}
	return path.Join(path.Dir(beside), name)
}
