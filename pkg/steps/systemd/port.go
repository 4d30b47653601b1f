package systemd

import (
	"fmt"
	"os"
	"slices"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/portowner"
	"github.com/sglprov/sglprov/pkg/service"
)

// PortHeldError is a unit that was not started because another process listens on its
// port: the unit's server would die on "address already in use" while the gate judged the
// other one. It carries exit code 5 (exitcode.ErrLocked).
type PortHeldError struct {
	// Unit is the unit that was to start; Port and Host where it listens.
	Unit string
	Port int
	Host string
	// Holder is the process that listens there.
	Holder portowner.Listener
}

// Error names the unit, the port, the process that holds it and the fix.
func (e *PortHeldError) Error() string {
	fix := "stop it or give this recipe another port"
	switch {
	case e.Holder.UserUnit != "":
		fix = fmt.Sprintf("stop it (systemctl --user disable --now %s, as the user whose manager %s is) or give this recipe another port",
			e.Holder.UserUnit, e.Holder.Unit)
	case e.Holder.Unit != "":
		fix = fmt.Sprintf("stop it (systemctl disable --now %s) or give this recipe another port", e.Holder.Unit)
	}
	return fmt.Sprintf("not starting %s: port %d is held by %s, which is not this unit's server: %s",
		e.Unit, e.Port, e.Holder, fix)
}

// Unwrap marks the error for exit code 5: another holds what the run needs.
func (e *PortHeldError) Unwrap() error { return exitcode.ErrLocked }

// checkPort refuses to start the unit while its port is held by a process that is not the
// unit's own (or one of the units in also, which a switch stops first): under systemd, a process in another unit's cgroup (or in none); under the
// exec manager, a process that is not a child of this one. A port the unit's own server
// holds is fine: restarting the unit frees it. Offline, nothing is started and nothing is
// checked.
func (s *Step) checkPort(env *engine.Env, m service.Manager, profile string, also ...string) error {
	var own func(l portowner.Listener) bool
	switch m.Kind() {
	case service.KindSystemd:
		own = func(l portowner.Listener) bool {
			return l.PID != 0 && (l.Unit == s.spec.Unit || slices.Contains(also, l.Unit))
		}
	case service.KindExec:
		self := os.Getpid()
		own = func(l portowner.Listener) bool {
			return l.PID != 0 && l.PID != self && portowner.DescendsFrom(l.PID, self)
		}
	default:
		return nil
	}
	d, err := s.data(env, profile)
	if err != nil {
		return err
	}
	ls, err := s.lookupPort(d.Port)
	if err != nil {
		return fmt.Errorf("checking who listens on port %d before starting %s: %w", d.Port, s.spec.Unit, err)
	}
	for _, l := range ls {
		if l.Conflicts(d.Host) && !own(l) {
			return &PortHeldError{Unit: s.spec.Unit, Port: d.Port, Host: d.Host, Holder: l}
		}
	}
	return nil
}
