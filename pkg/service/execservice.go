package service

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// ExecService is what the exec manager runs, read from a unit's [Service] section.
type ExecService struct {
	// Argv is ExecStart= as systemd passes it: unquoted, specifiers resolved, $VAR expanded
	// with the unit's Environment=.
	Argv []string
	// IgnoreFailure is set by a "-" prefix: a non-zero exit is not a failure.
	IgnoreFailure bool
	// Env is the unit's Environment=.
	Env map[string]string
	// WorkingDirectory and User are the unit's settings ("" when not set).
	WorkingDirectory, User string
	// Restart is Restart= ("no", "on-failure", "always"; others are read as on-failure).
	Restart string
	// RestartSec and TimeoutStopSec are the unit's delays (systemd's defaults when unset).
	RestartSec, TimeoutStopSec time.Duration
	// CacheDirectories are the CacheDirectory= folders, under the exec manager's cache root.
	CacheDirectories []string
}

// ReadService reads the [Service] section of a unit for the exec manager. Specifiers %%,
// %n, %N, %p, %i, %I and %C (cacheDir) are resolved; others are refused.
func ReadService(unit string, content []byte, cacheDir string) (*ExecService, error) {
	u, err := ParseUnit(content)
	if err != nil {
		return nil, fmt.Errorf("reading unit %q: %w", unit, err)
	}
	r := serviceReader{u: u, unit: unit, spec: execSpecifiers(unit, cacheDir)}
	svc := &ExecService{Restart: "no", RestartSec: 100 * time.Millisecond, TimeoutStopSec: 90 * time.Second}
	if svc.Env, err = r.environment(); err != nil {
		return nil, err
	}
	if err := r.execStart(svc); err != nil {
		return nil, err
	}
	if svc.WorkingDirectory, err = r.resolved("WorkingDirectory"); err != nil {
		return nil, err
	}
	if svc.User, err = r.resolved("User"); err != nil {
		return nil, err
	}
	if v := u.Value("Service", "Restart"); v != "" {
		svc.Restart = v
	}
	if err := r.timespan("RestartSec", &svc.RestartSec); err != nil {
		return nil, err
	}
	if err := r.timespan("TimeoutStopSec", &svc.TimeoutStopSec); err != nil {
		return nil, err
	}
	if svc.CacheDirectories, err = r.cacheDirectories(cacheDir); err != nil {
		return nil, err
	}
	return svc, nil
}

// execSpecifiers are the unit's specifiers, with %C standing for cacheDir.
func execSpecifiers(unit, cacheDir string) Specifiers {
	base := UnitSpecifiers(unit)
	return func(c byte) (string, bool) {
		if c == 'C' {
			return cacheDir, true
		}
		return base(c)
	}
}

// serviceReader reads the settings of a unit's [Service] section for the exec manager,
// its errors naming the unit.
type serviceReader struct {
	u    *UnitFile
	unit string
	spec Specifiers
}

// environment reads Environment=: every line's assignments, an empty line dropping those
// before it.
func (r serviceReader) environment() (map[string]string, error) {
	env := map[string]string{}
	for _, line := range r.u.Values("Service", "Environment") {
		if strings.TrimSpace(line) == "" {
			env = map[string]string{}
			continue
		}
		kvs, err := ParseEnvironmentLine(line, r.spec)
		if err != nil {
			return nil, fmt.Errorf("unit %q: %w", r.unit, err)
		}
		for _, kv := range kvs {
			env[kv[0]] = kv[1]
		}
	}
	return env, nil
}

// execStart reads the one ExecStart= (an empty one drops those before it) into svc's
// Argv, $VAR expanded with svc.Env unless the line says not to.
func (r serviceReader) execStart(svc *ExecService) error {
	var starts []string
	for _, v := range r.u.Values("Service", "ExecStart") {
		if strings.TrimSpace(v) == "" {
			starts = nil
			continue
		}
		starts = append(starts, v)
	}
	if len(starts) != 1 {
		return fmt.Errorf("unit %q: want exactly one ExecStart=, have %d", r.unit, len(starts))
	}
	cmd, err := ParseExecLine(starts[0], r.spec)
	if err != nil {
		return fmt.Errorf("unit %q: %w", r.unit, err)
	}
	svc.Argv, svc.IgnoreFailure = cmd.Argv, cmd.IgnoreFailure
	if !cmd.NoEnvExpand {
		svc.Argv = ExpandEnv(cmd.Argv, svc.Env)
	}
	return nil
}

// resolved returns the setting key with its specifiers resolved ("" when not set).
func (r serviceReader) resolved(key string) (string, error) {
	v, err := ResolveSpecifiers(r.u.Value("Service", key), r.spec)
	if err != nil {
		return "", fmt.Errorf("unit %q: %s=: %w", r.unit, key, err)
	}
	return v, nil
}

// timespan reads the time span key into to, when it is set and finite ("infinity"
// leaves to as it was).
func (r serviceReader) timespan(key string, to *time.Duration) error {
	v := r.u.Value("Service", key)
	if v == "" {
		return nil
	}
	t, finite, err := ParseTimespan(v)
	if err != nil {
		return fmt.Errorf("unit %q: %s=: %w", r.unit, key, err)
	}
	if finite {
		*to = t
	}
	return nil
}

// cacheDirectories reads CacheDirectory=: relative names, each made a folder under
// cacheDir.
func (r serviceReader) cacheDirectories(cacheDir string) ([]string, error) {
	var dirs []string
	for _, v := range r.u.Values("Service", "CacheDirectory") {
		for _, name := range strings.Fields(v) {
			name, err := ResolveSpecifiers(name, r.spec)
			if err != nil {
				return nil, fmt.Errorf("unit %q: CacheDirectory=: %w", r.unit, err)
			}
			if filepath.IsAbs(name) || strings.Contains(name, "..") {
				return nil, fmt.Errorf("unit %q: CacheDirectory=%s must be a relative name", r.unit, name)
			}
			dirs = append(dirs, filepath.Join(cacheDir, name))
		}
	}
	return dirs, nil
}
