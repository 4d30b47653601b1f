package systemd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

// maxDiffLines bounds the lines of a unit diff plan shows; maxUnitBytes the installed unit
// file it reads.
const (
	maxDiffLines = 24
	maxUnitBytes = 1 << 20
)

// unitDiff says, for plan, how the unit apply would install differs from the one installed
// now: the lines only the installed one has ("- "), then those only the new one has ("+ "),
// at most maxDiffLines; nothing when they are the same or the unit cannot be rendered.
func (s *Step) unitDiff(env *engine.Env, profile string) []string {
	want, err := s.render(env, profile)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := s.manager(ctx, env)
	if err != nil {
		return nil
	}
	path := m.UnitPath(s.spec.Unit)
	shown := displayPath(env, path)
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return []string{"unit file " + shown + ": not installed yet"}
	case err != nil:
		return []string{fmt.Sprintf("unit file %s: cannot be read: %v", shown, err)}
	case !fi.Mode().IsRegular() || fi.Size() > maxUnitBytes:
		return []string{fmt.Sprintf("unit file %s: not a regular file of at most %d bytes: not compared", shown, maxUnitBytes)}
	}
	have, err := os.ReadFile(path)
	if err != nil {
		return []string{fmt.Sprintf("unit file %s: cannot be read: %v", shown, err)}
	}
	if string(have) == string(want) {
		return []string{"unit file " + shown + ": unchanged"}
	}
	return append([]string{"unit file " + shown + " differs from the one apply installs (- installed, + new):"}, lineDiff(string(have), string(want), maxDiffLines)...)
}

// lineDiff returns the lines of old that new lacks ("- ") and those of new that old lacks
// ("+ "), each in its file's order, at most limit of them and a line saying how many more.
func lineDiff(old, new string, limit int) []string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	inOld, inNew := count(old), count(new)
	var out []string
	for _, l := range strings.Split(old, "\n") {
		if inNew[l] > 0 {
			inNew[l]--
			continue
		}
		out = append(out, "- "+l)
	}
	inOld = count(old)
	for _, l := range strings.Split(new, "\n") {
		if inOld[l] > 0 {
			inOld[l]--
			continue
		}
		out = append(out, "+ "+l)
	}
	if len(out) > limit {
		out = append(out[:limit], fmt.Sprintf("... and %d more lines", len(out)-limit))
	}
	return out
}
