package engine

import (
	"fmt"
	"os"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/refusal"
)

// ResultRefused is the result of a run refused before any step ran: the host falls short
// of the recipe (exit 4) or needs a reboot (exit 6).
const ResultRefused = "refused"

// Refused reports whether err is a refusal that RecordRefusal records: exit 4 or 6.
func Refused(err error) bool {
	code := exitcode.Of(err)
	return code == exitcode.ExitHost || code == exitcode.ExitReboot
}

// RecordRefusal records a run of recipe (its name and file) that was refused with err
// before any step ran: a run folder whose report.json has result "refused", the exit code
// and the error, and no steps, so that `status` shows the refusal and exits with its code.
// The state (state.json) is left as it is: nothing ran. The state dir must exist
// (EnsureStateDir) and the caller hold its lock.
func RecordRefusal(stateDir, recipe, recipeFile string, started time.Time, err error) (*Report, error) {
	e := &Engine{opts: Options{StateDir: stateDir}}
	dir, derr := e.newRunDir(started)
	if derr != nil {
		return nil, fmt.Errorf("recording the refused run: %w", derr)
	}
	rep := &Report{
		Recipe: recipe, RecipeFile: recipeFile, Started: started.UTC(), Duration: time.Since(started),
		Result: ResultRefused, ExitCode: exitcode.Of(err), Error: err.Error(), Refusals: refusal.Collect(err), Steps: []*StepReport{}, Dir: dir,
	}
	if werr := writeReport(rep); werr != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("recording the refused run: %w", werr)
	}
	return rep, nil
}
