// Command testsummary reads the output of `go test -json` on stdin and prints what a
// person reads of a plain `go test` (each package's ok or FAIL line, the output of the tests
// that failed, build errors), then one line per skipped test with its reason and, last, the
// suite's counts: "unit: 812 passed, 0 failed, 14 skipped". It exits 1 when a test or a
// package failed (or the stream could not be read), so that a Makefile pipe with pipefail
// fails with it.
//
// With -record FILE the counts are also appended to FILE; -total FILE then prints the sum
// of every suite recorded there as the last line, "N passed, N failed, N skipped", and
// removes the file.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	suite := flag.String("suite", "tests", "the suite's `NAME`, which starts its summary lines")
	record := flag.String("record", "", "append the counts to `FILE` (for -total)")
	total := flag.String("total", "", "print the sum of the counts recorded in `FILE`, then remove it")
	flag.Parse()
	if *total != "" {
		line, err := sumRecords(*total)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testsummary: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(line)
		if strings.Contains(line, " 0 failed,") {
			return
		}
		os.Exit(1)
	}
	s, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stdout, "testsummary: reading go test's output: %v\n", err)
		s.broken = true
	}
	s.write(os.Stdout, *suite)
	if *record != "" {
		if err := appendRecord(*record, *suite, s); err != nil {
			fmt.Fprintf(os.Stderr, "testsummary: %v\n", err)
			os.Exit(1)
		}
	}
	if s.failed() {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json's TestEvent, and the go command's
// build events, which carry ImportPath in place of Package).
type event struct {
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Output      string
	FailedBuild string
}

// maxLine bounds one line of the stream; maxKept bounds the output kept for one test (its
// last bytes), shown only when it fails.
const (
	maxLine = 16 << 20
	maxKept = 256 << 10
)

// summary is what a stream said.
type summary struct {
	// results are each test's last verdict (pass, fail, skip), by package and name.
	results map[key]string
	// reasons are the skipped tests' reasons.
	reasons map[key]string
	// pkgFailed are the packages whose run failed (a build failure, a TestMain that
	// exited, a panic), with or without a failed test.
	pkgFailed map[string]bool
	// broken is set when the stream could not be read to its end.
	broken bool
}

type key struct{ pkg, test string }

// summarize reads the stream from r, writes the plain output to w and returns the counts.
func summarize(r io.Reader, w io.Writer) (*summary, error) {
	s := &summary{results: map[key]string{}, reasons: map[key]string{}, pkgFailed: map[string]bool{}}
	kept := map[key]*strings.Builder{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			fmt.Fprintf(w, "%s\n", line) // not an event: the go command's own words
			continue
		}
		pkg := ev.Package
		if pkg == "" {
			// A build event names the package as "example.com/m/b [example.com/m/b.test]".
			pkg, _, _ = strings.Cut(ev.ImportPath, " ")
		}
		k := key{pkg, ev.Test}
		switch ev.Action {
		case "build-output":
			io.WriteString(w, ev.Output)
		case "build-fail":
			s.pkgFailed[pkg] = true
		case "output":
			if ev.Test == "" {
				if ev.Output != "PASS\n" { // plain go test says only "ok" for a package that passed
					io.WriteString(w, ev.Output)
				}
				continue
			}
			b := kept[k]
			if b == nil {
				b = &strings.Builder{}
				kept[k] = b
			}
			b.WriteString(ev.Output)
			if b.Len() > 2*maxKept {
				rest := b.String()[b.Len()-maxKept:]
				b.Reset()
				b.WriteString(rest)
			}
		case "pass", "fail", "skip":
			if ev.Test == "" {
				if ev.Action == "fail" {
					s.pkgFailed[pkg] = true
				}
				continue
			}
			s.results[k] = ev.Action
			switch ev.Action {
			case "fail":
				if b := kept[k]; b != nil {
					io.WriteString(w, b.String())
				}
			case "skip":
				s.reasons[k] = skipReason(kept[k])
			}
			delete(kept, k)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("a line longer than %d MiB", maxLine>>20)
		}
		return s, err
	}
	return s, nil
}

// skipReason is the last line a skipped test printed before its "--- SKIP" line, without
// the file:line prefix of t.Skip.
func skipReason(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	lines := strings.Split(b.String(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "--- SKIP") || strings.HasPrefix(l, "=== ") {
			continue
		}
		if _, rest, ok := strings.Cut(l, ".go:"); ok {
			if _, msg, ok := strings.Cut(rest, ": "); ok {
				return msg
			}
		}
		return l
	}
	return ""
}

// counts returns the verdicts of the leaf tests (a test with subtests counts through them),
// the skipped ones by name, and the failed packages that no failed test accounts for.
func (s *summary) counts() (passed, failed, skipped int, skips []key) {
	parents := map[key]bool{}
	for k := range s.results {
		for i := strings.LastIndex(k.test, "/"); i > 0; i = strings.LastIndex(k.test[:i], "/") {
			parents[key{k.pkg, k.test[:i]}] = true
		}
	}
	failedPkg := map[string]bool{}
	for k, v := range s.results {
		if parents[k] {
			continue
		}
		switch v {
		case "pass":
			passed++
		case "fail":
			failed++
			failedPkg[k.pkg] = true
		case "skip":
			skipped++
			skips = append(skips, k)
		}
	}
	for pkg := range s.pkgFailed {
		if !failedPkg[pkg] {
			failed++ // a package that failed outside its tests counts as one failure
		}
	}
	sort.Slice(skips, func(i, j int) bool {
		if skips[i].pkg != skips[j].pkg {
			return skips[i].pkg < skips[j].pkg
		}
		return skips[i].test < skips[j].test
	})
	return passed, failed, skipped, skips
}

func (s *summary) failed() bool {
	_, f, _, _ := s.counts()
	return f > 0 || s.broken
}

// write prints the skipped tests, one a line, then the counts, last.
func (s *summary) write(w io.Writer, suite string) {
	passed, failed, skipped, skips := s.counts()
	for _, k := range skips {
		reason := s.reasons[k]
		if reason == "" {
			reason = "no reason given"
		}
		fmt.Fprintf(w, "%s: skipped %s %s: %s\n", suite, k.pkg, k.test, reason)
	}
	if s.broken {
		failed++
	}
	fmt.Fprintf(w, "%s: %d passed, %d failed, %d skipped\n", suite, passed, failed, skipped)
}

// appendRecord appends the suite's counts to the file at path, then one line per test
// that ran ("ran PKG TEST", subtests' parents included) and per skipped leaf test
// ("skipped PKG TEST"), so that -total does not count as skipped a test that another
// suite of the same run ran (the e2e tests skip themselves in the unit suite, which runs
// them without -e2e, and run in the e2e suite).
func appendRecord(path, suite string, s *summary) error {
	passed, failed, skipped, skips := s.counts()
	if s.broken {
		failed++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d %d %d\n", suite, passed, failed, skipped)
	var ran []key
	for k, v := range s.results {
		if v == "pass" || v == "fail" {
			ran = append(ran, k)
		}
	}
	sort.Slice(ran, func(i, j int) bool { return ran[i].pkg+" "+ran[i].test < ran[j].pkg+" "+ran[j].test })
	for _, k := range ran {
		fmt.Fprintf(&b, "ran\t%s\t%s\n", k.pkg, k.test)
	}
	for _, k := range skips {
		fmt.Fprintf(&b, "skipped\t%s\t%s\n", k.pkg, k.test)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("recording the counts: %w", err)
	}
	_, err = io.WriteString(f, b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("recording the counts in %s: %w", path, err)
	}
	return nil
}

// sumRecords returns the total line of the counts recorded at path and removes the file.
// A test skipped in one suite that another suite ran is not counted as skipped (the line
// says how many were left out so).
func sumRecords(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the recorded counts: %w", err)
	}
	var passed, failed, skipped int
	ran := map[key]bool{}
	var skips []key
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Split(l, "\t"); len(f) == 3 && (f[0] == "ran" || f[0] == "skipped") {
			if f[0] == "ran" {
				ran[key{f[1], f[2]}] = true
			} else {
				skips = append(skips, key{f[1], f[2]})
			}
			continue
		}
		var name string
		var p, f, s int
		if _, err := fmt.Sscanf(l, "%s %d %d %d", &name, &p, &f, &s); err != nil {
			return "", fmt.Errorf("%s: bad line %q", path, l)
		}
		passed, failed, skipped = passed+p, failed+f, skipped+s
	}
	ranElsewhere := 0
	for _, k := range skips {
		if ran[k] {
			ranElsewhere++
		}
	}
	skipped -= ranElsewhere
	if err := os.Remove(path); err != nil {
		return "", fmt.Errorf("removing the recorded counts: %w", err)
	}
	line := fmt.Sprintf("%d passed, %d failed, %d skipped", passed, failed, skipped)
	if ranElsewhere > 0 {
		line += fmt.Sprintf(" (not counted as skipped: %d %s skipped in one suite and run in another)", ranElsewhere, plural(ranElsewhere))
	}
	return line, nil
}

func plural(n int) string {
	if n == 1 {
		return "test"
	}
	return "tests"
}
