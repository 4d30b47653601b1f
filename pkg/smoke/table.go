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
		fmt.Fprintf(tw, "ready in\t%s\n", res.TimeToReady.Round(time.Millisecond))
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
				c.Latency.Round(time.Millisecond), c.Sample)
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
