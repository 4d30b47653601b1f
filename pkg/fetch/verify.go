// Digests: the hashers fed in order while bytes arrive, and the check of a file on disk.

package fetch

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
)

// hashers computes the digests of a file in order.
type hashers struct {
	sha256 hash.Hash
	git    hash.Hash // nil unless needed
}

func (j *job) newHashers(size int64) *hashers {
	h := &hashers{sha256: sha256.New()}
	if j.f.SHA256 == "" && j.f.GitSHA1 != "" && size >= 0 {
		h.git = sha1.New()
		fmt.Fprintf(h.git, "blob %d\x00", size)
	}
	return h
}

func (h *hashers) Write(p []byte) (int, error) {
	h.sha256.Write(p)
	if h.git != nil {
		h.git.Write(p)
	}
	return len(p), nil
}

// gitBlobSHA1 returns the git blob sha1 of the file at path.
func gitBlobSHA1(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", st.Size())
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func verifyFile(path string, f File) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verifying %s: %w", path, err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return fmt.Errorf("verifying %s: %w", path, err)
	}
	if f.Size >= 0 && st.Size() != f.Size {
		return &MismatchError{Path: path, What: "size", Expected: fmt.Sprint(f.Size), Actual: fmt.Sprint(st.Size())}
	}
	if f.SHA256 != "" {
		h := sha256.New()
		if _, err := io.CopyBuffer(h, fh, make([]byte, 1<<20)); err != nil {
			return fmt.Errorf("verifying %s: %w", path, err)
		}
		if sum := hex.EncodeToString(h.Sum(nil)); sum != strings.ToLower(f.SHA256) {
			return &MismatchError{Path: path, What: "sha256", Expected: strings.ToLower(f.SHA256), Actual: sum}
		}
		return nil
	}
	if f.GitSHA1 == "" {
		return fmt.Errorf("verifying %s: no sha256 or git sha1 to check against", path)
	}
	sum, err := gitBlobSHA1(path)
	if err != nil {
		return err
	}
	if sum != strings.ToLower(f.GitSHA1) {
		return &MismatchError{Path: path, What: "git-sha1", Expected: strings.ToLower(f.GitSHA1), Actual: sum}
	}
	return nil
}
