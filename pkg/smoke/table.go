package smoke

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable writes the result as a table (case, verdict, reason, latency, sample) followed
// by a verdict line starting "smoke: PASS" or "smoke: FAIL".
func WriteTable(w io.Writer, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "server\t%s\n", res.URL)
	if res.Model != "" {
		fmt.Fprintf(tw, "model\t%s\n", res.Model)
	}
	if res.Ready {
		fmt.Fprintf(tw, "ready in\t%s\n", roundDuration(res.TimeToReady))
	}
	if len(res.Cases) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "CASE\tVERDICT\tREASON\tLATENCY\tSAMPLE")
		for _, c := range res.Cases {
			verdict := "FAIL"
			if c.Pass {
				verdict = "PASS"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, verdict, oneLine(c.Reason),
				roundDuration(c.Latency), c.Sample)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nsmoke: %s\n", res.Summary())
	return err
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
