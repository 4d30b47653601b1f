package pylock

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMergeReportKeepsEarlierWheels: a re-run whose pip installed nothing new (an empty
// install list) keeps the wheels the step's earlier report recorded; a new entry for a
// project replaces the old one.
func TestMergeReportKeepsEarlierWheels(t *testing.T) {
	dir := t.TempDir()
	into, from := filepath.Join(dir, "s.report.json"), filepath.Join(dir, "s.report.json.new")
	entry := func(name, version, sum string) string {
		return `{"metadata":{"name":"` + name + `","version":"` + version + `"},"download_info":{"url":"http://i/` + name + `-` + version + `-py3-none-any.whl","archive_info":{"hashes":{"sha256":"` + sum + `"}}}}`
	}
	a1, b1, b2 := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)
	os.WriteFile(from, []byte(`{"install":[`+entry("Alpha", "1.0", a1)+`,`+entry("beta", "1.0", b1)+`]}`), 0o600)
	if err := MergeReport(into, from); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(from, []byte(`{"install":[]}`), 0o600)
	if err := MergeReport(into, from); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(from, []byte(`{"install":[`+entry("beta", "2.0", b2)+`]}`), 0o600)
	if err := MergeReport(into, from); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(from); !os.IsNotExist(err) {
		t.Errorf("the run's report is still there: %v", err)
	}
	site := filepath.Join(dir, "site")
	for _, d := range [][2]string{{"Alpha", "1.0"}, {"beta", "2.0"}} {
		di := filepath.Join(site, d[0]+"-"+d[1]+".dist-info")
		os.MkdirAll(di, 0o755)
		os.WriteFile(filepath.Join(di, "METADATA"), []byte("Metadata-Version: 2.1\nName: "+d[0]+"\nVersion: "+d[1]+"\n\nlong description\n"), 0o644)
	}
	l, err := Scan(site, []string{into})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range l.Packages {
		got[p.Name+" "+p.Version] = p.SHA256
	}
	if got["alpha 1.0"] != a1 || got["beta 2.0"] != b2 || len(got) != 2 || len(l.Local) != 0 {
		t.Errorf("scanned %v (local %v); want alpha 1.0 from the first run and beta 2.0 from the last", got, l.Local)
	}
}

// TestParseRefusesBadEntries: a lock entry without a sha256 of 64 hex digits, with a path
// as its wheel, or naming a project twice is refused, naming the lock and the fix.
func TestParseRefusesBadEntries(t *testing.T) {
	sum := strings.Repeat("0", 64)
	for name, body := range map[string]string{
		"short digest": `{"version":1,"packages":[{"name":"a","version":"1","wheel":"a-1-py3-none-any.whl","sha256":"abc"}]}`,
		"path wheel":   `{"version":1,"packages":[{"name":"a","version":"1","wheel":"../a-1-py3-none-any.whl","sha256":"` + sum + `"}]}`,
		"twice":        `{"version":1,"packages":[{"name":"a","version":"1","wheel":"a-1-py3-none-any.whl","sha256":"` + sum + `"},{"name":"a","version":"2","wheel":"a-2-py3-none-any.whl","sha256":"` + sum + `"}]}`,
		"version":      `{"version":7,"packages":[]}`,
		"unknown key":  `{"version":1,"packages":[],"extra":1}`,
	} {
		if _, err := Parse([]byte(body), "x.lock.json"); err == nil || !strings.Contains(err.Error(), "x.lock.json") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// goodEntry is a well-formed package entry of a lock, as JSON, with url.
func goodEntry(name, version, url string) string {
	wheel := strings.ReplaceAll(name, "-", "_") + "-" + version + "-py3-none-any.whl"
	return `{"name":"` + name + `","version":"` + version + `","wheel":"` + wheel + `","sha256":"` + strings.Repeat("a", 64) + `","url":` + url + `}`
}

// TestParseRefusesInjectedFields: a field that would put more than its value into pip's
// requirements file (a newline, an environment marker, an option, a comment, a variable),
// a name, version, wheel and url that disagree, two packages naming one wheel file, and
// text after the JSON document, a key given twice or in another case are refused, naming
// the lock and the offending value; Requirements writes nothing of a lock Validate refuses.
func TestParseRefusesInjectedFields(t *testing.T) {
	sum := strings.Repeat("a", 64)
	evil := "http://i/files/alpha-1.0-py3-none-any.whl --hash=sha256:" + sum + "\nevil @ http://i/files/evil-6.6.6-py3-none-any.whl --hash=sha256:" + sum + "\n#"
	evilJSON, _ := json.Marshal(evil)
	lock := func(entries ...string) string {
		return `{"version":1,"packages":[` + strings.Join(entries, ",") + `]}`
	}
	for name, c := range map[string]struct{ body, want string }{
		"url with requirements": {lock(goodEntry("alpha", "1.0", string(evilJSON))), `holds ' '`},
		"url with a newline":    {lock(goodEntry("alpha", "1.0", `"http://i/files/alpha-1.0-py3-none-any.whl\nevil"`)), `holds '\n'`},
		"url with a marker":     {lock(goodEntry("alpha", "1.0", `"http://i/files/alpha-1.0-py3-none-any.whl; python_version < '3'"`)), `holds ';'`},
		"url with an option":    {lock(goodEntry("alpha", "1.0", `"http://i/x/alpha-1.0-py3-none-any.whl\t-r/etc/shadow"`)), `holds '\t'`},
		"url with a comment":    {lock(goodEntry("alpha", "1.0", `"http://i/files/alpha-1.0-py3-none-any.whl#x"`)), `holds '#'`},
		"url with a variable":   {lock(goodEntry("alpha", "1.0", `"http://i/${HOME}/alpha-1.0-py3-none-any.whl"`)), `holds '$'`},
		"url of another file":   {lock(goodEntry("alpha", "1.0", `"http://i/files/alpha-2.0-py3-none-any.whl"`)), `is not of the wheel alpha-1.0-py3-none-any.whl`},
		"url with no host":      {lock(goodEntry("alpha", "1.0", `"http:///alpha-1.0-py3-none-any.whl"`)), `names no host`},
		"url of ftp":            {lock(goodEntry("alpha", "1.0", `"ftp://i/alpha-1.0-py3-none-any.whl"`)), `want an http, https or file URL`},
		"url with a password":   {lock(goodEntry("alpha", "1.0", `"https://u:p@i/alpha-1.0-py3-none-any.whl"`)), `holds credentials`},
		"name with a newline":   {lock(`{"name":"-r /etc/shadow\nx","version":"1","wheel":"x-1-py3-none-any.whl","sha256":"` + sum + `"}`), `is not a normalized project name`},
		"name with a space":     {lock(`{"name":"a -r /etc/passwd","version":"1","wheel":"a-1-py3-none-any.whl","sha256":"` + sum + `"}`), `is not a normalized project name`},
		"version not pep 440":   {lock(`{"name":"a","version":"1 --hash=sha256:` + sum + `","wheel":"a-1-py3-none-any.whl","sha256":"` + sum + `"}`), `is not a PEP 440 version`},
		"wheel of another":      {lock(`{"name":"alpha","version":"1.0","wheel":"beta-1.0-py3-none-any.whl","sha256":"` + sum + `"}`), `the wheel beta-1.0-py3-none-any.whl is of beta 1.0`},
		"wheel of 2.0":          {lock(`{"name":"alpha","version":"1.0","wheel":"alpha-2.0-py3-none-any.whl","sha256":"` + sum + `"}`), `is of alpha 2.0`},
		"wheel not a wheel":     {lock(`{"name":"alpha","version":"1.0","wheel":"alpha-1.0.whl","sha256":"` + sum + `"}`), `not a wheel's file name`},
		"one wheel twice": {lock(`{"name":"alpha","version":"1.0","wheel":"alpha-1.0-py3-none-any.whl","sha256":"`+sum+`"}`,
			`{"name":"alpha-x","version":"1.0","wheel":"alpha-1.0-py3-none-any.whl","sha256":"`+sum+`"}`), `the wheel alpha-1.0-py3-none-any.whl is of alpha 1.0`},
		"text after":           {lock() + "\n{\"version\":1,\"packages\":[]}", `text follows the JSON document`},
		"junk after":           {lock() + " x", `text follows the JSON document`},
		"key twice":            {`{"version":1,"packages":[{"name":"alpha","name":"evil","version":"1.0","wheel":"alpha-1.0-py3-none-any.whl","sha256":"` + sum + `"}]}`, `"name" is given twice`},
		"key in another case":  {`{"version":1,"packages":[{"Name":"alpha","version":"1.0","wheel":"alpha-1.0-py3-none-any.whl","sha256":"` + sum + `"}]}`, `"Name" is not in lower case`},
		"local with a newline": {`{"version":1,"packages":[],"local":[{"name":"x","version":"1","source":"editable","url":"file:///a\nb"}]}`, `holds a space or control character`},
	} {
		_, err := Parse([]byte(c.body), "x.lock.json")
		if err == nil || !strings.Contains(err.Error(), "x.lock.json") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want the lock and %q named", name, err, c.want)
		}
	}
	// A well-formed lock parses, with a marker-free URL of its wheel and a torch-like
	// local version.
	ok := lock(goodEntry("alpha", "1.0", `"https://i/files/alpha-1.0-py3-none-any.whl"`),
		`{"name":"torch","version":"2.5.1+cu124","wheel":"torch-2.5.1+cu124-cp312-cp312-linux_x86_64.whl","sha256":"`+sum+`","url":"https://download.pytorch.org/whl/cu124/torch-2.5.1%2Bcu124-cp312-cp312-linux_x86_64.whl"}`,
		`{"name":"zope-interface","version":"7.0","wheel":"zope.interface-7.0-1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl","sha256":"`+sum+`"}`)
	if _, err := Parse([]byte(ok+"\n"), "ok.lock.json"); err != nil {
		t.Errorf("a good lock: %v", err)
	}
	// Requirements refuses a lock made in code that Validate refuses.
	bad := &Lock{Version: Version, Packages: []Package{{Name: "alpha", Version: "1.0", Wheel: "alpha-1.0-py3-none-any.whl", SHA256: sum, URL: evil}}}
	if b, err := bad.Requirements(true); err == nil || len(b) != 0 {
		t.Errorf("requirements of a lock with a newline in a url: %q, %v", b, err)
	}
}

// TestCanonicalVersion: PEP 440's normal form, with trailing zeros of the release dropped.
func TestCanonicalVersion(t *testing.T) {
	for in, want := range map[string]string{
		"1.0": "1", "1.0.0": "1", "v1.02": "1.2", "0!2.5.1+CU124": "2.5.1+cu124", "1!2": "1!2",
		"1.0alpha1": "1a1", "1.0-beta": "1b0", "1.0c2": "1rc2", "1.0.post": "1.post0", "1.0-3": "1.post3",
		"2.0.dev": "2.dev0", "1.0rc1.post2.dev3": "1rc1.post2.dev3", "1.0+ubuntu-1_a": "1+ubuntu.1.a",
	} {
		if got, ok := CanonicalVersion(in); !ok || got != want {
			t.Errorf("CanonicalVersion(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "1.0 ", " 1.0", "1.0\n", "1.0;x", "1..0", "a1", "1.0+", "1.0+a b", "2004d"} {
		if _, ok := CanonicalVersion(bad); ok {
			t.Errorf("CanonicalVersion(%q) accepted", bad)
		}
	}
}

// TestReadRefusesAFIFOAtOnce: a lock path that is a FIFO is refused at once, named, never
// waited on (no writer ever opens it).
func TestReadRefusesAFIFOAtOnce(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock.json")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Read(p); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "FIFO") || !strings.Contains(err.Error(), p) {
			t.Errorf("reading a FIFO as the lock: %v; want it refused as a FIFO, named", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO as the lock waits for a writer")
	}
}

// writeDist writes a dist-info folder of name and version (METADATA only) in site.
func writeDist(t *testing.T, site, dir, name, version string) string {
	t.Helper()
	di := filepath.Join(site, dir)
	if err := os.MkdirAll(di, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(di, "METADATA"), []byte("Metadata-Version: 2.1\nName: "+name+"\nVersion: "+version+"\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return di
}

// TestScanRefusesWhatItCannotLock: a dist-info that is a symbolic link (Python follows
// it), a METADATA whose Name is no project name or whose Version is no PEP 440 version, a
// METADATA or direct_url.json that is a FIFO (refused, not waited on), and a recorded
// wheel whose file name disagrees with the distribution are refused, named; none is left
// out of a lock silently.
func TestScanRefusesWhatItCannotLock(t *testing.T) {
	sum := strings.Repeat("b", 64)
	for name, c := range map[string]struct {
		setup func(t *testing.T, site string)
		want  string
	}{
		"symlinked dist-info": {func(t *testing.T, site string) {
			di := writeDist(t, t.TempDir(), "torch-2.5.1.dist-info", "torch", "2.5.1")
			if err := os.Symlink(di, filepath.Join(site, "torch-2.5.1.dist-info")); err != nil {
				t.Fatal(err)
			}
		}, "torch-2.5.1.dist-info is a symbolic link"},
		"dist-info a file": {func(t *testing.T, site string) {
			os.WriteFile(filepath.Join(site, "x-1.dist-info"), nil, 0o644)
		}, "x-1.dist-info is not a folder"},
		"name with an option": {func(t *testing.T, site string) {
			writeDist(t, site, "a-1.dist-info", "a -r /etc/passwd", "1")
		}, `Name "a -r /etc/passwd" is no project name`},
		"name continued": {func(t *testing.T, site string) {
			writeDist(t, site, "a-1.dist-info", "a\n -r /etc/passwd", "1")
		}, `is no project name`},
		"version not pep 440": {func(t *testing.T, site string) {
			writeDist(t, site, "a-1.dist-info", "a", "1 --hash=sha256:"+sum)
		}, `is no PEP 440 version`},
		"metadata a fifo": {func(t *testing.T, site string) {
			os.MkdirAll(filepath.Join(site, "a-1.dist-info"), 0o755)
			syscall.Mkfifo(filepath.Join(site, "a-1.dist-info", "METADATA"), 0o600)
		}, "FIFO"},
		"direct_url a fifo": {func(t *testing.T, site string) {
			di := writeDist(t, site, "a-1.dist-info", "a", "1")
			syscall.Mkfifo(filepath.Join(di, "direct_url.json"), 0o600)
		}, "FIFO"},
		"wheel of another version": {func(t *testing.T, site string) {
			di := writeDist(t, site, "alpha-1.0.dist-info", "alpha", "1.0")
			os.WriteFile(filepath.Join(di, "direct_url.json"), []byte(`{"url":"http://i/files/alpha-2.0-py3-none-any.whl","archive_info":{"hashes":{"sha256":"`+sum+`"}}}`), 0o644)
		}, "is of alpha 2.0"},
	} {
		site := t.TempDir()
		writeDist(t, site, "beta-1.0.dist-info", "beta", "1.0")
		c.setup(t, site)
		done := make(chan error, 1)
		go func() { _, err := Scan(site, nil); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v; want %q", name, err, c.want)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: the scan waits", name)
		}
	}
	// A distribution installed without a wheel (an egg-info, a folder or a file) is listed
	// as local, not left out.
	site := t.TempDir()
	egg := filepath.Join(site, "old-1.0-py3.11.egg-info")
	os.MkdirAll(egg, 0o755)
	os.WriteFile(filepath.Join(egg, "PKG-INFO"), []byte("Metadata-Version: 1.0\nName: Old\nVersion: 1.0\n"), 0o644)
	os.WriteFile(filepath.Join(site, "flat-2.0.egg-info"), []byte("Metadata-Version: 1.0\nName: flat\nVersion: 2.0\n"), 0o644)
	if l, err := Scan(site, nil); err != nil || len(l.Local) != 2 || l.Local[0].Name != "flat" || l.Local[1].Name != "old" || l.Local[1].Source != "unrecorded" {
		t.Errorf("scanning egg-infos: %+v, %v; want flat and old listed as unrecorded", l, err)
	}
	// A wheel URL with an escaped "+" (PyTorch's index) is locked under its file's name.
	site = t.TempDir()
	di := writeDist(t, site, "torch-2.5.1+cu124.dist-info", "torch", "2.5.1+cu124")
	os.WriteFile(filepath.Join(di, "direct_url.json"), []byte(`{"url":"https://download.pytorch.org/whl/cu124/torch-2.5.1%2Bcu124-cp312-cp312-linux_x86_64.whl","archive_info":{"hashes":{"sha256":"`+sum+`"}}}`), 0o644)
	l, err := Scan(site, nil)
	if err != nil || len(l.Packages) != 1 || l.Packages[0].Wheel != "torch-2.5.1+cu124-cp312-cp312-linux_x86_64.whl" {
		t.Errorf("scanning torch from its index: %+v, %v", l, err)
	}
}
