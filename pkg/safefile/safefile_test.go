package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const stranger = 4242 // a uid that is neither root nor this user

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
}

func write(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func TestCheckOwnerAndFolders(t *testing.T) {
	needRoot(t)
	o := Invoker(func(string) string { return "" })
	cases := []struct {
		name string
		// setup makes the tree under dir and returns the path to check.
		setup func(t *testing.T, dir string) string
		want  string // "" accepts
	}{
		{"own file in own folder", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "r.yaml")
			write(t, p, 0o644)
			return p
		}, ""},
		{"file of another user", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "r.yaml")
			write(t, p, 0o644)
			if err := os.Chown(p, stranger, stranger); err != nil {
				t.Fatal(err)
			}
			return p
		}, "owned by uid 4242"},
		{"group-writable file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "r.yaml")
			write(t, p, 0o664)
			return p
		}, "writable by group or others (mode 0664)"},
		{"file in a world-writable folder", func(t *testing.T, dir string) string {
			d := filepath.Join(dir, "open")
			if err := os.Mkdir(d, 0o777); err != nil {
				t.Fatal(err)
			}
			os.Chmod(d, 0o777)
			p := filepath.Join(d, "r.yaml")
			write(t, p, 0o644)
			return p
		}, "folder " + "OPEN" + " is writable by group or others (mode 0777) and not sticky"},
		{"folder of another user", func(t *testing.T, dir string) string {
			d := filepath.Join(dir, "theirs")
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(d, "r.yaml")
			write(t, p, 0o644)
			if err := os.Chown(d, stranger, stranger); err != nil {
				t.Fatal(err)
			}
			return p
		}, "is owned by uid 4242, not by root or this user"},
		{"own file in a sticky world-writable folder", func(t *testing.T, dir string) string {
			d := filepath.Join(dir, "tmp")
			if err := os.Mkdir(d, 0o777); err != nil {
				t.Fatal(err)
			}
			os.Chmod(d, 0o777|os.ModeSticky)
			p := filepath.Join(d, "r.yaml")
			write(t, p, 0o644)
			return p
		}, ""},
		{"another user's file in a sticky folder", func(t *testing.T, dir string) string {
			d := filepath.Join(dir, "tmp")
			if err := os.Mkdir(d, 0o777); err != nil {
				t.Fatal(err)
			}
			os.Chmod(d, 0o777|os.ModeSticky)
			p := filepath.Join(d, "r.yaml")
			write(t, p, 0o644)
			if err := os.Chown(p, stranger, stranger); err != nil {
				t.Fatal(err)
			}
			return p
		}, "owned by uid 4242"},
		{"a symbolic link to another user's file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "r.yaml")
			write(t, p, 0o644)
			if err := os.Chown(p, stranger, stranger); err != nil {
				t.Fatal(err)
			}
			l := filepath.Join(dir, "link.yaml")
			if err := os.Symlink(p, l); err != nil {
				t.Fatal(err)
			}
			return l
		}, "owned by uid 4242"},
		// Whoever owns a link, or can replace it, chooses what it points to: a state dir
		// given as /tmp/st, a link another user made there, would have sglprov chmod and
		// write into any folder root owns.
		{"another user's link in a sticky folder", func(t *testing.T, dir string) string {
			d := sticky(t, dir)
			own := filepath.Join(dir, "own")
			if err := os.Mkdir(own, 0o755); err != nil {
				t.Fatal(err)
			}
			return link(t, own, filepath.Join(d, "state"), stranger)
		}, "symbolic link " + "STICKY" + "/state is owned by uid 4242"},
		{"own link in a sticky folder", func(t *testing.T, dir string) string {
			d := sticky(t, dir)
			p := filepath.Join(dir, "r.yaml")
			write(t, p, 0o644)
			return link(t, p, filepath.Join(d, "r.yaml"), 0)
		}, ""},
		{"own link in a world-writable folder", func(t *testing.T, dir string) string {
			d := filepath.Join(dir, "open")
			if err := os.Mkdir(d, 0o777); err != nil {
				t.Fatal(err)
			}
			os.Chmod(d, 0o777)
			p := filepath.Join(dir, "r.yaml")
			write(t, p, 0o644)
			return link(t, p, filepath.Join(d, "r.yaml"), 0)
		}, "folder " + "OPEN" + " is writable by group or others (mode 0777) and not sticky"},
		{"another user's link to a folder on the way", func(t *testing.T, dir string) string {
			own := filepath.Join(dir, "own")
			if err := os.Mkdir(own, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(own, "r.yaml"), 0o644)
			return filepath.Join(link(t, "own", filepath.Join(dir, "via"), stranger), "r.yaml")
		}, "symbolic link " + "DIR" + "/via is owned by uid 4242"},
		{"own relative links, chained", func(t *testing.T, dir string) string {
			own := filepath.Join(dir, "own")
			if err := os.Mkdir(own, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(own, "r.yaml"), 0o644)
			link(t, "own/../own", filepath.Join(dir, "a"), 0)
			return link(t, "a/r.yaml", filepath.Join(dir, "b"), 0)
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			p := c.setup(t, dir)
			err := o.Check(p)
			want := strings.NewReplacer("OPEN", filepath.Join(dir, "open"), "STICKY", filepath.Join(dir, "tmp"), "DIR", dir).Replace(c.want)
			switch {
			case want == "" && err != nil:
				t.Fatalf("Check(%s) = %v, want accepted", p, err)
			case want != "" && (err == nil || !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), want)):
				t.Fatalf("Check(%s) = %v, want ErrUntrusted with %q", p, err, want)
			}
		})
	}
}

// sticky makes the folder tmp under dir, world-writable with the sticky bit (as /tmp).
func sticky(t *testing.T, dir string) string {
	t.Helper()
	d := filepath.Join(dir, "tmp")
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return d
}

// link makes the symbolic link l to target, owned by uid, and returns l.
func link(t *testing.T, target, l string, uid int) string {
	t.Helper()
	if err := os.Symlink(target, l); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(l, uid, uid); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestInvokerTrustsSudoUser(t *testing.T) {
	needRoot(t)
	o := Invoker(func(k string) string {
		if k == "SUDO_UID" {
			return "4242"
		}
		return ""
	})
	if !o.Trusts(stranger) || !o.Trusts(0) || o.Trusts(4343) {
		t.Fatalf("owners %v: want root and SUDO_UID 4242 only", o.uids)
	}
}

func TestReadRegularRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	for _, p := range []string{fifo, dir, "/dev/null"} {
		done := make(chan error, 1)
		go func() { _, err := ReadRegular(p, 0); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("ReadRegular(%s) = %v, want ErrNotRegular", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ReadRegular(%s) blocked", p)
		}
	}
	p := filepath.Join(dir, "f")
	write(t, p, 0o644)
	if b, err := ReadRegular(p, 1); err != nil || string(b) != "x" {
		t.Errorf("ReadRegular(1-byte file, limit 1) = %q, %v", b, err)
	}
	if err := os.WriteFile(p, []byte("xy"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRegular(p, 1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadRegular(2-byte file, limit 1) = %v, want ErrTooLarge", err)
	}
}

func TestNoFollow(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "precious")
	write(t, target, 0o644)
	link := filepath.Join(dir, "lock")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenNoFollow(link, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600); !errors.Is(err, ErrSymlink) {
		t.Errorf("OpenNoFollow(symlink) = %v, want ErrSymlink", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "x" {
		t.Errorf("the link's target holds %q, want it untouched", b)
	}
	if err := NoSymlinks(dir); !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), link) {
		t.Errorf("NoSymlinks = %v, want the link named", err)
	}
	if err := NoSymlinks(dir, "precious", "missing"); err != nil {
		t.Errorf("NoSymlinks(named regular and missing entries) = %v", err)
	}
}
