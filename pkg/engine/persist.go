package engine

// SaveState writes the state with every step's data as it is now, outside a run: a
// caller that changed a step through this engine after its apply (the daemon moving a
// service to another profile) keeps the change for the next run. The caller holds the
// state dir's lock.
func (e *Engine) SaveState() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.saveState()
}
