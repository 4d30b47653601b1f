//go:build !linux

package source

import "errors"

// exchange is not available here; replace falls back to two renames.
func exchange(a, b string) error {
	return errors.New("atomic exchange not supported")
}
