package reclaim_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sglprov/sglprov/internal/foreign"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/reclaim"
	"github.com/sglprov/sglprov/pkg/service"
)

// callsManager is the offline manager under a root that records every call that would
// reach the service manager (stop, remove): a unit systemd knows by a name sglprov has no
// file at is the system's, and no call may reach it.
type callsManager struct {
	*service.Offline
	mu    sync.Mutex
	calls []string
}

func (m *callsManager) Kind() string { return service.KindSystemd }

func (m *callsManager) Stop(_ context.Context, unit string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, "stop "+unit)
	return nil
}

func (m *callsManager) Remove(_ context.Context, unit string) error {
	m.mu.Lock()
	m.calls = append(m.calls, "remove "+unit)
	m.mu.Unlock()
	if err := os.Remove(m.UnitPath(unit)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// The unit names that reach units sglprov did not write: an admin's backup.service in
// etc/systemd/system and the system's ssh.service in lib/systemd/system (the shared
// fixture's). remove and gc of records naming them leave both byte-identical and call no
// stop or disable on them; a file sglprov rendered for the recipe at the system's name
// (which shadows the system's unit) is deleted, giving the name back.
func TestRemoveAndGCWithUnitNamesNotSglprovs(t *testing.T) {
	rendered := func(recipe string) string {
		return "# Managed by sglprov. Recipe: " + recipe + ". Profile: . Fingerprint: f. Do not edit: changes are replaced on the next apply.\n[Service]\nExecStart=/bin/true\n"
	}
	cases := []struct {
		name, unit string
		// ours writes the recipe's rendered unit in etc/systemd/system first.
		ours bool
		// want is in the output; calls are the manager calls allowed.
		want  string
		calls int
	}{
		{name: "admin unit", unit: foreign.AdminUnit, want: "is not one sglprov rendered for recipe x; left as it is"},
		{name: "system unit, no file of sglprov's", unit: foreign.VendorUnit, want: "the unit of that name is the system's; left as it is"},
		{name: "system unit shadowed by sglprov's", unit: foreign.VendorUnit, ours: true, calls: 1},
	}
	for _, tc := range cases {
		for _, gc := range []bool{false, true} {
			name := tc.name + "/remove"
			if gc {
				name = tc.name + "/gc"
			}
			t.Run(name, func(t *testing.T) {
				n := newNode(t, true)
				etc := n.path("etc/systemd/system/" + tc.unit)
				if tc.ours {
					if err := os.WriteFile(etc, []byte(rendered("x")), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				rec := engine.Owned{Kind: engine.OwnedUnit, Path: tc.unit, Step: "svc"}
				if gc {
					// What a recipe left when it stopped naming the unit.
					rec.Recipe = "x"
					n.save(map[string][]engine.Owned{}, rec)
				} else {
					n.save(map[string][]engine.Owned{"x": {rec}})
				}
				m := &callsManager{Offline: service.NewOffline(n.root)}
				newManager := func(context.Context, string) (service.Manager, error) { return m, nil }
				var out bytes.Buffer
				var err error
				if gc {
					err = reclaim.GC(context.Background(), reclaim.GCOptions{StateDir: n.state, Root: n.root, Out: &out, NewManager: newManager})
				} else {
					err = reclaim.Remove(context.Background(), reclaim.RemoveOptions{StateDir: n.state, Root: n.root, Recipe: "x", Out: &out, NewManager: newManager})
				}
				if err != nil {
					t.Fatalf("%v\n%s", err, out.String())
				}
				if !strings.Contains(out.String(), tc.want) {
					t.Errorf("output does not say %q:\n%s", tc.want, out.String())
				}
				if len(m.calls) != tc.calls {
					t.Errorf("manager calls %q, want %d", m.calls, tc.calls)
				}
				if tc.ours && exists(etc) {
					t.Errorf("sglprov's unit shadowing the system's is still there")
				}
				if _, err := os.Stat(filepath.Join(n.state, "state.json")); err != nil {
					t.Fatal(err)
				}
				n.intact(name)
			})
		}
	}
}

// A weights record edited by hand (its path changed to another folder, its device and
// inode taken out) is refused when remove and gc read it: exit 2, naming the state file and
// the fix; the folder it now names keeps every file.
func TestWeightsRecordWithoutIdentityIsRefused(t *testing.T) {
	for _, gc := range []bool{false, true} {
		n := newNode(t, true)
		w := n.weights("data/models/tiny", "model.safetensors")
		// The user's home has a file of the listed name.
		w.Path, w.Dev, w.Ino = n.path("home/u"), 0, 0
		w.Files = []string{"notes.txt"}
		var out string
		var err error
		if gc {
			n.save(nil, w)
			out, err = n.gc()
		} else {
			n.save(map[string][]engine.Owned{"a": {w}})
			out, err = n.remove("a", true)
		}
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "not the device and inode of its folder") ||
			!strings.Contains(err.Error(), filepath.Join(n.state, "state.json")) || !strings.Contains(err.Error(), "delete it from the state file") {
			t.Errorf("gc=%v: a record without identity: %v\n%s", gc, err, out)
		}
		n.intact("a record without identity")
	}
}

// gc reaches the part files through the checked weights folder's handle: a part-file
// folder replaced by a link to a victim's folder holding files of the part files' names is
// never entered, and the victim's files stay byte-identical; a part file of its own in
// place is freed.
func TestGCPartFilesNeverThroughALink(t *testing.T) {
	n := newNode(t, false)
	w := n.weights("data/models/tiny", "model.safetensors")
	w.Parts = []string{".sglprov/parts/model.safetensors.part"}
	victim := n.path("home/u/parts")
	os.MkdirAll(victim, 0o755)
	for _, f := range []string{"model.safetensors.part", "model.safetensors.part.json"} {
		os.WriteFile(filepath.Join(victim, f), []byte("a user's "+f), 0o644)
	}
	os.MkdirAll(n.path("data/models/tiny/.sglprov"), 0o755)
	if err := os.Symlink(victim, n.path("data/models/tiny/.sglprov/parts")); err != nil {
		t.Fatal(err)
	}
	n.save(map[string][]engine.Owned{"a": {w}})
	if out, err := n.gc(); err != nil {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	for _, f := range []string{"model.safetensors.part", "model.safetensors.part.json"} {
		if b, err := os.ReadFile(filepath.Join(victim, f)); err != nil || string(b) != "a user's "+f {
			t.Errorf("%s behind the link: %q %v", f, b, err)
		}
	}
	// The folder itself, with a part file of its own: freed.
	os.Remove(n.path("data/models/tiny/.sglprov/parts"))
	part := n.path("data/models/tiny/.sglprov/parts/model.safetensors.part")
	os.MkdirAll(filepath.Dir(part), 0o755)
	os.WriteFile(part, []byte("partial"), 0o644)
	out, err := n.gc()
	if err != nil || exists(part) || !strings.Contains(out, "part files in") {
		t.Errorf("gc of its own part file: %v, still there %v\n%s", err, exists(part), out)
	}
	n.intact("part files behind a link")
}
