package systemd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/sglargs"
	"github.com/sglprov/sglprov/pkg/switchover"
	"github.com/sglprov/sglprov/templates"
)

// ReadFiles reads the unit template and checks the unit's name on the node (checkUnit),
// for validate and plan.
func (s *Step) ReadFiles(env *engine.Env) error {
	_, _, _, err := s.template(env)
	if err != nil {
		return engine.AtField("template", err)
	}
	return engine.AtField("unit", s.checkUnit(env, nil))
}

// checkUnit refuses a unit name whose file sglprov must not write (service.CheckUnitName):
// a unit file there that sglprov did not render for this recipe (an admin's, a package's,
// another recipe's), or a name that a unit of the system holds, which the unit would
// shadow. Validate, plan and apply all check it before anything is written.
// With m (apply: the manager that writes it) the unit's path is m's; without (validate and
// plan make no manager) it is where the recipe's manager keeps it.
func (s *Step) checkUnit(env *engine.Env, m service.Manager) error {
	kind := s.spec.Manager
	if m != nil {
		kind = m.Kind()
	}
	path, vendor := service.UnitFiles(service.Options{Kind: kind, Root: env.Root, Offline: env.Offline, StateDir: env.StateDir}, s.spec.Unit)
	if m != nil {
		path = m.UnitPath(s.spec.Unit)
	}
	_, err := service.CheckUnitName(path, vendor, s.spec.Unit, env.RecipeName)
	return err
}

// template returns the unit template, its name and its digest.

func (s *Step) template(env *engine.Env) (name string, text []byte, digest string, err error) {
	if s.spec.Template == "" {
		text, err = templates.Read(templates.SGLangService)
		name = "builtin:" + templates.SGLangService
	} else {
		// A recipe's own template (or a shipped one named builtin:templates/...), with the
		// permission check every recipe file gets.
		text, name, err = env.ReadRecipeFile(s.spec.Template)
		if err != nil && !errors.Is(err, exitcode.ErrUsage) {
			err = fmt.Errorf("%w: reading unit template: %w", exitcode.ErrUsage, err)
		}
	}
	if err != nil {
		return "", nil, "", err
	}
	sum := sha256.Sum256(text)
	return name, text, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// pick returns the profile to install now: the first candidate (the recorded winner when
// it still matches), "" with no profiles.
func (s *Step) pick(env *engine.Env) (string, error) {
	c, err := s.candidates(env)
	if err != nil || len(c) == 0 {
		return "", err
	}
	return c[0], nil
}

// workingDirectory makes a relative working_directory absolute against the recipe's
// folder, as every step's dirs are (systemd refuses a relative WorkingDirectory=). The
// unit is read by the host's own service manager, so the path is the host's view, not
// mapped into --root; "~" (the user's home) and the "-" prefix keep their meaning.
func workingDirectory(env *engine.Env, wd string) string {
	dash, p := "", wd
	if rest, ok := strings.CutPrefix(p, "-"); ok {
		dash, p = "-", rest
	}
	if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "~") {
		return wd
	}
	p = env.RecipePath(p)
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return dash + p
}

// data returns the template data for profile.
func (s *Step) data(env *engine.Env, profile string) (service.Data, error) {
	d := service.Data{
		Recipe:           env.RecipeName,
		Unit:             s.spec.Unit,
		Command:          s.spec.Command,
		User:             s.spec.User,
		WorkingDirectory: workingDirectory(env, s.spec.WorkingDirectory),
		ModelPath:        s.spec.ModelPath,
		Host:             s.spec.Host,
		Port:             s.port,
		Env:              map[string]string{},
	}
	if len(d.Command) == 0 {
		d.Command = service.DefaultCommand()
	}
	d.Python = d.Command[0]
	if d.Host == "" {
		d.Host = DefaultHost
	}
	if profile != "" {
		p, ok := env.Profiles[profile]
		if !ok {
			return d, fmt.Errorf("%w: profile %q is not defined in the recipe's profiles", exitcode.ErrUsage, profile)
		}
		d.Profile = service.Profile{Name: profile, Args: p.Args, Env: p.Env}
		for k, v := range p.Env {
			d.Env[k] = v
		}
	}
	if v, byIndex := env.Facts.CUDAVisibleDevices(); v != "" {
		// The recipe was given some GPUs (requires.gpu.devices): the server sees those.
		d.Env["CUDA_VISIBLE_DEVICES"] = v
		if byIndex {
			d.Env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
		}
	}
	for k, v := range s.spec.Env {
		d.Env[k] = v
	}
	kernelCacheEnv(env, d.Env)
	// NCCL chooses its peer-to-peer path unless the host's facts say it is blocked.
	for k, v := range s.ncclDecision(env, profile).Env {
		d.Env[k] = v
	}
	// Across nodes, the group's sockets name the interface that reaches the head.
	for k, v := range s.groupDecision(env, profile).Env {
		d.Env[k] = v
	}
	// systemd gives a service its own short PATH, without the virtual environment's bin
	// (ninja) or the toolkit's (nvcc), which the server's run-time kernel compiles exec.
	d.Env["PATH"] = unitPath(d.Command, d.Env)
	all := append(append([]string(nil), d.Profile.Args...), s.spec.Args...)
	if v, ok := flagValue(all, sglargs.Spellings("--model-path")...); ok {
		d.ModelPath = v
	} else {
		d.Args = append(d.Args, "--model-path", d.ModelPath)
	}
	if v, ok := flagValue(all, sglargs.Spellings("--host")...); ok {
		d.Host = v
	} else {
		d.Args = append(d.Args, "--host", d.Host)
	}
	if v, ok := flagValue(all, sglargs.Spellings("--port")...); ok {
		p, err := strconv.Atoi(v)
		if err != nil {
			return d, fmt.Errorf("%w: --port %q is not a number", exitcode.ErrUsage, v)
		}
		d.Port = p
	} else {
		d.Args = append(d.Args, "--port", strconv.Itoa(d.Port))
	}
	if err := groupArgs(env, &d, all); err != nil {
		return d, err
	}
	if env.Nodes == nil && !hasFlag(all, sglargs.Spellings("--tp-size")...) && env.Facts.Count() > 0 {
		d.Args = append(d.Args, "--tp", strconv.Itoa(env.Facts.Count()))
	}
	d.Args = append(d.Args, all...)
	return d, nil
}

// render renders the unit for profile.
func (s *Step) render(env *engine.Env, profile string) ([]byte, error) {
	name, text, digest, err := s.template(env)
	if err != nil {
		return nil, err
	}
	d, err := s.data(env, profile)
	if err != nil {
		return nil, err
	}
	inputs, err := json.Marshal(struct {
		Template string
		Data     service.Data
	}{digest, d})
	if err != nil {
		return nil, fmt.Errorf("digesting the unit's inputs: %w", err)
	}
	sum := sha256.Sum256(inputs)
	d.Fingerprint = hex.EncodeToString(sum[:8])
	out, err := service.Render(filepath.Base(name), text, d)
	if err != nil {
		return nil, fmt.Errorf("rendering unit %q: %w", s.spec.Unit, err)
	}
	return out, nil
}

// displayPath returns path as the host will see it (without --root).
func displayPath(env *engine.Env, path string) string {
	if env.Root == "" || env.Root == "/" {
		return path
	}
	rel, err := filepath.Rel(env.Root, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return path
	}
	return "/" + rel
}

// ServiceName returns the unit's name.
func (s *Step) ServiceName() string { return s.spec.Unit }

// ServedModel returns the name the unit serves its model under (--served-model-name, else
// the model path, as SGLang defaults it) and the model path, for the active profile: the
// gate checks that the server it judges says the same.
func (s *Step) ServedModel(env *engine.Env) (name, path string, err error) {
	d, err := s.data(env, s.Active(env))
	if err != nil {
		return "", "", err
	}
	name = d.ModelPath
	if v, ok := flagValue(d.Args, sglargs.Spellings("--served-model-name")...); ok && v != "" {
		name = v
	}
	return name, d.ModelPath, nil
}

// Serving reads the server the service runs from its installed unit, the one a restart
// starts (engine.ServerReader); before one is installed, from the unit rendered for the
// active profile.
func (s *Step) Serving(ctx context.Context, env *engine.Env) (switchover.Server, error) {
	m, err := s.manager(ctx, env)
	if err != nil {
		return switchover.Server{}, err
	}
	profile := s.Active(env)
	content, err := os.ReadFile(m.UnitPath(s.spec.Unit))
	if errors.Is(err, fs.ErrNotExist) {
		content, err = s.render(env, profile)
	}
	if err != nil {
		return switchover.Server{}, fmt.Errorf("reading the unit of %s: %w", s.spec.Unit, err)
	}
	srv, err := switchover.Identify(s.spec.Unit, content)
	srv.Profile = profile
	return srv, err
}
