// Package buildinfo says which build of sglprov is running: its version and the VCS
// commit, commit time and modified flag that Go records in the binary.
package buildinfo

import (
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
)

// Version is the release version, set with
// -ldflags "-X github.com/sglprov/sglprov/pkg/buildinfo.Version=v1.2.3". Without it the
// main module's version from the build info is used ("(devel)" becomes "dev").
var Version = ""

// Commit, CommitTime and Modified are the VCS stamp a build passes by hand (`make build`
// sets them with .ci/vcs-ldflags): Go records none in a git worktree, whose .git is a
// file. They are used only when Go's build info has no commit.
var (
	Commit     = ""
	CommitTime = ""
	Modified   = ""
)

// Info is what a build says of itself. Fields the binary does not record are "".
type Info struct {
	// Version is the release version, or "dev".
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from.
	Commit string `json:"commit"`
	// Time is the commit's time (RFC 3339), as the VCS reports it.
	Time string `json:"commit_time"`
	// Modified is "true" when the working tree had changes, "false" when it had none, and
	// "" when unknown (in JSON: true, false or null).
	Modified string `json:"modified"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

// MarshalJSON writes Info with modified as a JSON boolean (null when unknown), as machines
// read a flag.
func (i Info) MarshalJSON() ([]byte, error) {
	var modified *bool
	if m, err := strconv.ParseBool(i.Modified); err == nil {
		modified = &m
	}
	return json.Marshal(struct {
		Version   string `json:"version"`
		Commit    string `json:"commit"`
		Time      string `json:"commit_time"`
		Modified  *bool  `json:"modified"`
		GoVersion string `json:"go_version"`
	}{i.Version, i.Commit, i.Time, modified, i.GoVersion})
}

// UnmarshalJSON reads what MarshalJSON writes (and the older string form of modified).
func (i *Info) UnmarshalJSON(b []byte) error {
	var in struct {
		Version   string          `json:"version"`
		Commit    string          `json:"commit"`
		Time      string          `json:"commit_time"`
		Modified  json.RawMessage `json:"modified"`
		GoVersion string          `json:"go_version"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*i = Info{Version: in.Version, Commit: in.Commit, Time: in.Time, GoVersion: in.GoVersion}
	var flag bool
	var text string
	switch {
	case len(in.Modified) == 0 || string(in.Modified) == "null":
	case json.Unmarshal(in.Modified, &flag) == nil:
		i.Modified = strconv.FormatBool(flag)
	case json.Unmarshal(in.Modified, &text) == nil:
		i.Modified = text
	default:
		return fmt.Errorf("reading build info: modified is %s, not a boolean", in.Modified)
	}
	return nil
}

// Read returns the running binary's Info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return FromBuildInfo(bi, Version).WithStamp(Commit, CommitTime, Modified)
}

// WithStamp returns i with commit, its time and the modified flag filled in when i has no
// commit of its own (what Go records wins).
func (i Info) WithStamp(commit, time, modified string) Info {
	if i.Commit == "" && commit != "" {
		i.Commit, i.Time, i.Modified = commit, time, modified
	}
	return i
}

// FromBuildInfo returns the Info of bi (nil: nothing recorded), with version as the
// release version when it is set.
func FromBuildInfo(bi *debug.BuildInfo, version string) Info {
	info := Info{Version: version}
	if bi != nil {
		info.GoVersion = bi.GoVersion
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Commit = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	return info
}

// String is the multi-line form `sglprov version` prints.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sglprov %s\n", i.Version)
	switch {
	case i.Commit == "":
		b.WriteString("commit:   unknown (built without VCS information, e.g. by go test or -buildvcs=false)\n")
	default:
		fmt.Fprintf(&b, "commit:   %s\n", i.Commit)
		fmt.Fprintf(&b, "time:     %s\n", orUnknown(i.Time))
		fmt.Fprintf(&b, "modified: %s\n", orUnknown(i.Modified))
	}
	fmt.Fprintf(&b, "go:       %s\n", orUnknown(i.GoVersion))
	return b.String()
}

// Labels are the labels of the sglprov_build_info metric.
func (i Info) Labels() map[string]string {
	return map[string]string{
		"version":     i.Version,
		"commit":      orUnknown(i.Commit),
		"commit_time": orUnknown(i.Time),
		"modified":    orUnknown(i.Modified),
		"goversion":   orUnknown(i.GoVersion),
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
