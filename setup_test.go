package sglprov

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMESetup: the README's setup works where there is no sudo (make deps as root, as
// is), names every suite make test prints a line for (the Makefile's -suite names and
// verify-patches' patches-COMMIT), and make deps says what it builds before the build that
// takes about 30 s.
func TestREADMESetup(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile("(?m)^sudo make deps").Match(readme) || !strings.Contains(string(readme), "no `sudo` needed") {
		t.Error("README.md: make deps must run as is as root, without sudo")
	}
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	suites := regexp.MustCompile(`-suite ([\w-]+)`).FindAllSubmatch(mk, -1)
	if len(suites) == 0 {
		t.Fatal("the Makefile names no suite")
	}
	for _, s := range append(suites, [][]byte{nil, []byte("patches-COMMIT")}) {
		if !strings.Contains(string(readme), "`"+string(s[1])+"`") {
			t.Errorf("README.md does not name the suite %s", s[1])
		}
	}
	deps, err := os.ReadFile(".ci/deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	say := strings.Index(string(deps), `echo "deps: building the OCI registry`)
	build := strings.Index(string(deps), "go build")
	if say < 0 || build >= 0 && build < say {
		t.Error(".ci/deps.sh does not say that it builds the registry before it does")
	}
}
