package logval

import (
	"fmt"
	"io"

	"charm.land/log/v2"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

// NewLoggerFunc returns a maker of loggers of format (text, json or logfmt; "" is text)
// at level (debug, info, warn or error) writing to w; another format or level is a usage
// error naming the --log-format or --log-level flag.
func NewLoggerFunc(format, level string) (func(w io.Writer) *log.Logger, error) {
	var fmtr log.Formatter
	// Machines get whole timestamps (RFC 3339, UTC offset, milliseconds); people on a
	// terminal get the time of day.
	timeFormat := "2006-01-02T15:04:05.000Z07:00"
	switch format {
	case "text", "":
		fmtr, timeFormat = log.TextFormatter, "15:04:05"
	case "json":
		fmtr = log.JSONFormatter
	case "logfmt":
		fmtr = log.LogfmtFormatter
	default:
		return nil, fmt.Errorf("%w: --log-format %q: want text, json or logfmt", exitcode.ErrUsage, format)
	}
	lvl, err := log.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", exitcode.ErrUsage, level)
	}
	return func(w io.Writer) *log.Logger {
		return log.NewWithOptions(w, log.Options{Formatter: fmtr, Level: lvl, ReportTimestamp: true, TimeFormat: timeFormat})
	}, nil
}
