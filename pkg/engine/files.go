package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/sglprov/sglprov/pkg/exitcode"
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
		return fmt.Errorf("%w: %v (or pass --insecure-permissions)", exitcode.ErrUsage, err)
	}
	return err
}

// ReadTrusted reads a recipe file on disk: only a regular file (a FIFO or device is refused
// at once, exit 2), of at most limit bytes when limit > 0.
func ReadTrusted(p string, limit int64) ([]byte, error) {
	b, err := safefile.ReadRegular(p, limit)
	if errors.Is(err, safefile.ErrNotRegular) || errors.Is(err, safefile.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
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
			return nil, p, fmt.Errorf("%w: %s: this build ships no files", exitcode.ErrUsage, p)
		}
		b, err := fs.ReadFile(e.Builtin, path.Clean(name))
		if err != nil {
			return nil, p, fmt.Errorf("%w: reading shipped file %s: %v", exitcode.ErrUsage, p, err)
		}
		return b, p, nil
	}
	full := e.RecipePath(p)
	if !e.InsecurePermissions {
		if err := CheckPermissions(full); err != nil {
			return nil, full, e.missingRecipeFile(full, err)
		}
	}
	b, err := ReadTrusted(full, 0)
	if err != nil {
		return nil, full, e.missingRecipeFile(full, err)
	}
	return b, full, nil
}

// missingRecipeFile makes a recipe file that is not there the recipe's error (exitcode.ErrUsage):
// the recipe's own inputs come with it, no step makes them.
func (e *Env) missingRecipeFile(full string, err error) error {
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fmt.Errorf("%w: %s does not exist: the files a recipe reads (a patch series and its patches, a unit "+
		"template, a questions file) are relative to the recipe's folder %s; put the file there or fix the path "+
		"(a file shipped in the binary is builtin:NAME)", exitcode.ErrUsage, full, e.RecipeDir)
}

// CheckSecretFile checks a host file that holds a secret (the hub token) before it is
// used: a file that is not there, or not a regular file, is the recipe's error (exitcode.ErrUsage)
// naming the file and the fix, and so is one that the group or others may read, unless
// insecure (--insecure-permissions) is set.
func CheckSecretFile(field, p string, insecure bool) error {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s %s does not exist: write the secret there (chmod 600), or leave %s empty", exitcode.ErrUsage, field, p, field)
	case err != nil:
		return fmt.Errorf("checking %s %s: %w", field, p, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s %s is not a regular file", exitcode.ErrUsage, field, p)
	case fi.Mode().Perm()&0o077 != 0 && !insecure:
		return fmt.Errorf("%w: %s %s may be read by its group or others (mode %04o): chmod 600 %s (or pass --insecure-permissions)",
			exitcode.ErrUsage, field, p, fi.Mode().Perm(), p)
	}
	return nil
}

// JoinRecipePath names a file beside another recipe file (a patch beside its series),
// keeping the builtin: prefix.
func JoinRecipePath(beside, name string) string {
	if rest, ok := strings.CutPrefix(beside, BuiltinPrefix); ok {
		return BuiltinPrefix + path.Join(path.Dir(rest), name)
	}
	return path.Join(path.Dir(beside), name)
}
