package daemon

// ServerDeaths is what the service manager says of the model server's deaths: how many
// times it restarted the server after it died since it last started it (the exec
// supervisor's count, systemd's NRestarts), and the last one: the unit, the process and
// how it ended.
type ServerDeaths struct {
	Restarts int
	Unit     string
	PID      int
	Exit     string
}

// deathCount is the daemon's record of the server's deaths between checks.
type deathCount struct {
	// restarts is the service manager's count at the last check.
	restarts int
	// canaryFailed counts the canary failures since the last check, prevFailed those of
	// the round before (a canary that failed while the server was down may come a round
	// before the supervisor's restart): a death the canary saw fail is counted once.
	canaryFailed, prevFailed int
}

// noteServerDeaths asks the service manager (Options.Server) how many times it restarted
// the server since the last check. Each new death is logged in one line (the unit, the
// process, how it ended, the count), sets the server_restarts gauge and counts as a
// canary failure unless the canary failed meanwhile: a server that died and came back
// between two canaries was not serving for a while, which canary_failures_total must show.
func (d *Loop) noteServerDeaths() {
	failed := d.deaths.canaryFailed + d.deaths.prevFailed
	d.deaths.prevFailed, d.deaths.canaryFailed = d.deaths.canaryFailed, 0
	if d.o.Server == nil {
		return
	}
	s, ok := d.o.Server()
	if !ok {
		return
	}
	d.o.Metrics.SetServerRestarts(d.o.Recipe, s.Restarts)
	died := s.Restarts - d.deaths.restarts
	if s.Restarts < d.deaths.restarts {
		// The server was started anew (an apply, a rung): the count starts again.
		died = s.Restarts
	}
	d.deaths.restarts = s.Restarts
	if died <= 0 {
		return
	}
	d.o.Log.Warn("the model server died and its service manager restarted it", "unit", s.Unit, "pid", s.PID,
		"exit", s.Exit, "deaths", died, "restarts", s.Restarts)
	d.deaths.prevFailed = 0 // the failures went with these deaths
	if unseen := died - failed; unseen > 0 {
		d.m.canaryFailures(unseen)
	}
}
