package gate

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable writes the result as a table (case, kind, verdict, answers judged, latency or
// its p50/p99 spread, reason, sample), the first misses of accuracy cases, and a verdict
// line starting "smoke: PASS" or "smoke: FAIL".
func WriteTable(w io.Writer, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "server\t%s\n", res.URL)
	if res.Model != "" {
		fmt.Fprintf(tw, "model\t%s\n", res.Model)
	}
	if res.Ready {
		fmt.Fprintf(tw, "ready in\t%s\n", roundDuration(res.TimeToReady))
	}
	if res.Seed != 0 {
		fmt.Fprintf(tw, "seed\t%d (%s=%d replays these prompts)\n", res.Seed, SeedEnv, res.Seed)
	}
	if p := res.Perf; p != nil {
		fmt.Fprintf(tw, "speed\tdecode %.1f tokens/s, time to first token %s (medians)\n", p.DecodeTPS, roundDuration(p.TTFT))
	}
	if len(res.Cases) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "CASE\tKIND\tVERDICT\tANSWERS\tLATENCY\tREASON\tSAMPLE")
		for _, c := range res.Cases {
			verdict := "FAIL"
			if c.Pass {
				verdict = "PASS"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Kind, verdict, answersCell(c),
				latencyCell(c), oneLine(c.Reason), c.Sample)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range res.Cases {
		if len(c.Misses) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: first misses (score %.2f, threshold %.2f)\n", c.Name, derefScore(c.Score), c.MinScore)
		for _, m := range c.Misses {
			fmt.Fprintf(w, "  %s  want %s  got %s\n", strconv.Quote(m.Prompt), strings.Join(m.Want, " or "), m.Got)
		}
	}
	_, err := fmt.Fprintf(w, "\nsmoke: %s\n", res.Summary())
	return err
}

// answersCell is "1", or "64" for a load case, with the failures when there were any.
func answersCell(c CaseResult) string {
	if c.Failed > 0 && c.Answers > 1 {
		return fmt.Sprintf("%d (%d failed)", c.Answers, c.Failed)
	}
	return strconv.Itoa(c.Answers)
}

// latencyCell is the request's latency, or the p50/p99 spread of several.
func latencyCell(c CaseResult) string {
	if c.Answers > 1 {
		return fmt.Sprintf("p50 %s p99 %s", roundDuration(c.P50), roundDuration(c.P99))
	}
	return roundDuration(c.Latency).String()
}

func derefScore(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// roundDuration keeps three significant figures or so: 1.234s, 12ms, 0.41ms.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(10 * time.Microsecond)
}
