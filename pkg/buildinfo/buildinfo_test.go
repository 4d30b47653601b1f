package buildinfo

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-11-30T21:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	for _, tc := range []struct {
		name, version, want string
		bi                  *debug.BuildInfo
	}{
		{"vcs, no version", "", "sglprov dev\ncommit:   0123456789abcdef0123456789abcdef01234567\ntime:     2026-11-30T21:00:00Z\nmodified: true\ngo:       go1.26.8\n", bi},
		{"release version", "v1.2.3", "sglprov v1.2.3\n", bi},
		{"nothing recorded", "", "sglprov dev\ncommit:   unknown (built without VCS information", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FromBuildInfo(tc.bi, tc.version).String()
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("got:\n%s\nwant a prefix:\n%s", got, tc.want)
			}
		})
	}
	l := FromBuildInfo(bi, "").Labels()
	if l["commit"] != "0123456789abcdef0123456789abcdef01234567" || l["modified"] != "true" || l["commit_time"] != "2026-11-30T21:00:00Z" || l["version"] != "dev" {
		t.Errorf("labels %v", l)
	}
	mod := FromBuildInfo(&debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261130210000-0123456789ab+dirty"}}, "")
	if mod.Version != "v0.0.0-20261130210000-0123456789ab+dirty" {
		t.Errorf("version from the main module: %q", mod.Version)
	}
}

// A binary built from a git checkout says which commit, read from Go's build info.
func TestReadInABuildFromGit(t *testing.T) {
	for _, tool := range []string{"git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	dir := t.TempDir()
	src, err := os.ReadFile("buildinfo.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.mod":                 "module probe\n\ngo 1.26\n",
		"buildinfo/buildinfo.go": string(src),
		"main.go": `package main

import (
	"encoding/json"
	"os"

	"probe/buildinfo"
)

func main() { json.NewEncoder(os.Stdout).Encode(buildinfo.Read()) }
`,
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sh := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GOFLAGS=-buildvcs=true", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	sh("git", "init", "-q", ".")
	sh("git", "add", "-A")
	sh("git", "commit", "-q", "-m", "probe")
	commit := sh("git", "rev-parse", "HEAD")
	sh("go", "build", "-o", "probe", ".")
	var info Info
	if err := json.Unmarshal([]byte(sh("./probe")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Commit != commit || info.Modified != "false" || info.Time == "" || !strings.HasPrefix(info.GoVersion, "go1.") {
		t.Errorf("read %+v; want commit %s, not modified", info, commit)
	}
	// A change not committed shows.
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(files["main.go"]+"\n// changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sh("go", "build", "-o", "probe", ".")
	if err := json.Unmarshal([]byte(sh("./probe")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Modified != "true" {
		t.Errorf("modified = %q after a change, want true", info.Modified)
	}
}

// In a git worktree (.git is a file) Go records no commit; `make build` stamps it with
// .ci/vcs-ldflags, and Read reports that commit.
func TestReadInABuildFromAWorktree(t *testing.T) {
	for _, tool := range []string{"git", "go", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	stamp, err := filepath.Abs(filepath.Join("..", "..", ".ci", "vcs-ldflags"))
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	src, err := os.ReadFile("buildinfo.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.mod":                 "module probe\n\ngo 1.26\n",
		".gitignore":             "probe\n",
		"buildinfo/buildinfo.go": string(src),
		"main.go": "package main\n\nimport (\n\t\"encoding/json\"\n\t\"os\"\n\n\t\"probe/buildinfo\"\n)\n\n" +
			"func main() { json.NewEncoder(os.Stdout).Encode(buildinfo.Read()) }\n",
	}
	for name, text := range files {
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wt := filepath.Join(t.TempDir(), "wt")
	sh := func(dir, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GOFLAGS=-buildvcs=auto", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	sh(repo, "git", "init", "-q", ".")
	sh(repo, "git", "add", "-A")
	sh(repo, "git", "commit", "-q", "-m", "probe")
	sh(repo, "git", "worktree", "add", "-q", wt)
	commit := sh(wt, "git", "rev-parse", "HEAD")
	read := func() Info {
		var info Info
		if err := json.Unmarshal([]byte(sh(wt, "./probe")), &info); err != nil {
			t.Fatal(err)
		}
		return info
	}
	sh(wt, "go", "build", "-o", "probe", ".")
	if info := read(); info.Commit != "" {
		t.Logf("this Go records the commit in a worktree too: %+v", info)
	}
	flags := sh(wt, "sh", stamp, "probe/buildinfo")
	sh(wt, "go", "build", "-ldflags", flags, "-o", "probe", ".")
	if info := read(); info.Commit != commit || info.Time == "" || info.Modified != "false" {
		t.Errorf("read %+v; want commit %s, a time, not modified", info, commit)
	}
}

// TestJSONModifiedIsABool: version --json gives the modified flag as a JSON boolean, null
// when the build does not know it.
func TestJSONModifiedIsABool(t *testing.T) {
	for modified, want := range map[string]string{"false": `"modified":false`, "true": `"modified":true`, "": `"modified":null`} {
		b, err := json.Marshal(Info{Version: "dev", Commit: "abc", Modified: modified})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("Modified %q: %s, want %s", modified, b, want)
		}
	}
}
