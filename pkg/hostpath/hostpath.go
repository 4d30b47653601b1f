// Package hostpath maps the host paths a recipe names into an alternative root, as
// `systemctl --root` does, so that a whole node can be written under a folder (an image being
// built, a test). It is a leaf package that the engine and the libraries share.
package hostpath

import (
	"path/filepath"
	"strings"
)

// Under maps the absolute path p into root. A root of "" or "/" and a relative p leave p as
// it is.
func Under(root, p string) string {
	if root == "" || root == "/" || !filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, strings.TrimPrefix(filepath.Clean(p), "/"))
}
