package engine

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

// BuiltinPrefix marks a recipe path that names a file shipped inside the binary
// ("builtin:patches/sglang/<commit>/series"), so that a recipe copied alone onto a node
// still finds its patches and templates.
const BuiltinPrefix = "builtin:"

// CheckPermissions refuses a file that group or others can write (as sshd's StrictModes
// does): anyone who can change a recipe, patch or template can run commands as root.
func CheckPermissions(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s is writable by group or others (mode %04o): anyone who can change it can run commands as this user; `chmod go-w %s`, or pass --insecure-permissions",
			ErrUsage, p, st.Mode().Perm(), p)
	}
	return nil
}

// ReadRecipeFile reads a file the recipe names (a patch series or patch, a unit template):
// "builtin:NAME" from the files shipped in the binary, anything else relative to the
// recipe's folder. A file on disk that group or others can write is refused unless the
// run was started with --insecure-permissions. It returns the data and the resolved name.
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
	b, err := os.ReadFile(full)
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
