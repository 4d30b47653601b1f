// Package filelist reads the file lists the bench drivers take: one
// "URL SHA256 SIZE PATH" line per file, blank lines skipped.
package filelist

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/fetch"
)

// Read parses the list at path into the files it names.
func Read(path string) ([]fetch.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading list: %w", err)
	}
	defer f.Close()
	var out []fetch.File
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 4 {
			return nil, fmt.Errorf("list line %q: want URL SHA256 SIZE PATH", sc.Text())
		}
		size, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("list line %q: %w", sc.Text(), err)
		}
		out = append(out, fetch.File{URL: fields[0], SHA256: fields[1], Size: size, Path: fields[3]})
	}
	return out, sc.Err()
}
