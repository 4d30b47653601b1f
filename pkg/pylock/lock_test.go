package pylock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
