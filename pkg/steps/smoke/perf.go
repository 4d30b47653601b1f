package smoke

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// perfDir is where the gate keeps each generation's last passing figures, in the state
// directory.
const perfDir = "gate-perf"

// maxPerfBytes bounds a recorded figures file.
const maxPerfBytes = 64 << 10

var perfKey = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// perfPath is the file of generation key's figures ("" when there is none to name).
func perfPath(env *engine.Env, key string) string {
	if env == nil || env.StateDir == "" || !perfKey.MatchString(key) {
		return ""
	}
	return filepath.Join(env.StateDir, perfDir, key+".json")
}

// recordedPerf is a generation's figures as the gate records them.
type recordedPerf struct {
	Generation string    `json:"generation"`
	At         time.Time `json:"at"`
	Perf       gate.Perf `json:"perf"`
}

// RecordPerf keeps res's figures as generation key's last (a passing gate of the server
// that runs from it), for a later switch to compare its candidate with.
func RecordPerf(env *engine.Env, key string, res *gate.Result) error {
	path := perfPath(env, key)
	if path == "" || res == nil || !res.Pass || res.Perf == nil {
		return nil
	}
	b, err := json.Marshal(recordedPerf{Generation: key, At: time.Now().UTC(), Perf: *res.Perf})
	if err != nil {
		return fmt.Errorf("encoding the gate's figures: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("recording the gate's figures of generation %s: %w", key, err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("recording the gate's figures of generation %s: %w", key, err)
	}
	return nil
}

// ServingPerf returns the last recorded figures of generation key (nil when none were
// recorded); a file that cannot be read or parsed is an error naming it.
func ServingPerf(env *engine.Env, key string) (*gate.Perf, error) {
	path := perfPath(env, key)
	if path == "" {
		return nil, nil
	}
	b, err := safefile.ReadRegular(path, maxPerfBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the serving generation's gate figures: %w", err)
	}
	var rec recordedPerf
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("reading the serving generation's gate figures %s: %w", path, err)
	}
	return &rec.Perf, nil
}
