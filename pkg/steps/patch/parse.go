package patch

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// maxBinarySize bounds the inflated size of one binary fragment of a patch.
const maxBinarySize = 256 << 20

// lineError is a fault of a patch file at one of its lines.
type lineError struct {
	Line int
	Msg  string
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

var (
	hunkHeaderRE = regexp.MustCompile(`^@@ -([0-9]+)(?:,([0-9]+))? \+([0-9]+)(?:,([0-9]+))? @@`)
	// gitdiffLineRE reads the line number out of go-gitdiff's parse errors.
	gitdiffLineRE = regexp.MustCompile(`^gitdiff: line ([0-9]+): (.*)$`)
	binaryHdrRE   = regexp.MustCompile(`^(literal|delta) [0-9]+\r?\n?$`)
)

// parsePatch parses a patch file whole, as apply will use it: every hunk's line counts are
// checked against its lines (go-gitdiff stops reading a hunk when its counts are met and
// skips what follows as noise, so a header that counts too few lines would silently drop
// the rest of the hunk), and every binary fragment is inflated and its size checked. A
// fault is a *lineError naming the line of the patch.
func parsePatch(raw []byte) ([]*gitdiff.File, error) {
	lines := splitLines(raw)
	if err := checkHunkCounts(lines); err != nil {
		return nil, err
	}
	files, _, err := gitdiff.Parse(bytes.NewReader(raw))
	if err != nil {
		if m := gitdiffLineRE.FindStringSubmatch(err.Error()); m != nil {
			n, _ := strconv.Atoi(m[1])
			return nil, &lineError{Line: n, Msg: m[2]}
		}
		return nil, err
	}
	// The binary fragments, in patch order, and the lines their headers are at.
	var at []int
	for i, l := range lines {
		if strings.TrimRight(l, "\r\n") != "GIT binary patch" || i+1 >= len(lines) || !binaryHdrRE.MatchString(lines[i+1]) {
			continue
		}
		at = append(at, i+2)
		// The reverse fragment, if any, follows the blank line that ends the forward one.
		for j := i + 2; j+1 < len(lines); j++ {
			if strings.TrimRight(lines[j], "\r\n") == "" {
				if binaryHdrRE.MatchString(lines[j+1]) {
					at = append(at, j+2)
				}
				break
			}
		}
	}
	k := 0
	for _, f := range files {
		for _, frag := range []*gitdiff.BinaryFragment{f.BinaryFragment, f.ReverseBinaryFragment} {
			if frag == nil {
				continue
			}
			line := 0
			if k < len(at) {
				line = at[k]
			}
			k++
			if err := checkBinary(frag); err != nil {
				return nil, &lineError{Line: line, Msg: fmt.Sprintf("binary patch of %s: %v", fileName(f), err)}
			}
		}
	}
	return files, nil
}

// checkBinary inflates a binary fragment and checks its size, as applying it would.
func checkBinary(frag *gitdiff.BinaryFragment) error {
	if frag.Size > maxBinarySize {
		return fmt.Errorf("%d bytes inflated, more than the %d MiB a patch may carry", frag.Size, maxBinarySize>>20)
	}
	if _, err := io.Copy(io.Discard, io.LimitReader(frag.Data(), maxBinarySize+1)); err != nil {
		return fmt.Errorf("corrupt data: %w", err)
	}
	return nil
}

// checkHunkCounts checks that each hunk of the patch has the lines its header counts: no
// fewer (the next header, or a line that is no hunk line, comes first) and no more (a
// hunk line follows the counted ones; a line of blanks, an email signature's "-- " and
// the next file's "--- " do not count).
func checkHunkCounts(lines []string) error {
	inDiff := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "diff ") || strings.HasPrefix(l, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ ") {
			inDiff = true
			continue
		}
		m := hunkHeaderRE.FindStringSubmatch(l)
		if !inDiff || m == nil {
			continue
		}
		count := func(s string) int {
			if s == "" {
				return 1
			}
			n, _ := strconv.Atoi(s)
			return n
		}
		wantOld, wantNew := count(m[2]), count(m[4])
		old, nw := wantOld, wantNew
		hdr := strings.TrimRight(m[0], "\r\n")
		short := func(at int, found string) error {
			return &lineError{Line: at, Msg: fmt.Sprintf("the hunk %s at line %d counts %d old and %d new lines, but %s after %d old and %d new: the hunk header miscounts lines",
				hdr, i+1, wantOld, wantNew, found, wantOld-old, wantNew-nw)}
		}
		j := i + 1
		for ; j < len(lines) && (old > 0 || nw > 0); j++ {
			switch lines[j][0] {
			case ' ', '\n':
				old--
				nw--
			case '-':
				old--
			case '+':
				nw--
			case '\\':
			default:
				return short(j+1, fmt.Sprintf("%s comes", show(lines[j])))
			}
			if old < 0 || nw < 0 {
				return short(j+1, "it has more of one kind")
			}
		}
		if old > 0 || nw > 0 {
			return short(len(lines), "the patch ends")
		}
		for j < len(lines) && strings.HasPrefix(lines[j], "\\") {
			j++
		}
		if j < len(lines) {
			next := lines[j]
			// A line of blanks after a hunk is noise (an editor's), as git reads it.
			extra := next[0] == ' ' && strings.TrimSpace(next) != "" || next[0] == '+' ||
				next[0] == '-' && !strings.HasPrefix(next, "-- ") && !strings.HasPrefix(next, "--- ") && strings.TrimRight(next, "\r\n") != "--"
			if extra {
				return &lineError{Line: j + 1, Msg: fmt.Sprintf("the hunk %s at line %d counts %d old and %d new lines, but its lines go on (%s): the hunk header miscounts lines",
					hdr, i+1, wantOld, wantNew, show(next))}
			}
		}
		i = j - 1
	}
	return nil
}
