package engine

// SkipError is returned by a step's Run when the step did not do its work and says why
// (the smoke gate under --root, where nothing was started): the run records the step as
// skipped with that reason, never as ok, and the run does not fail for it.
type SkipError struct {
	// Reason says why the step did nothing, e.g. "offline (--root): no server is started".
	Reason string
}

// Error says the step was skipped and why.
func (e *SkipError) Error() string { return "skipped: " + e.Reason }

// Skipped returns the error a step's Run returns when it skipped its work for reason.
func Skipped(reason string) error { return &SkipError{Reason: reason} }
