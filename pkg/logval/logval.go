// Package logval holds log values that read well in a text log and are numbers in a
// JSON log: a size is "257.8 MiB" on a terminal and 270336000 (bytes) in JSON; a duration
// is "1.250" and 1.25 (seconds). Log them under keys that name the unit: "bytes",
// "seconds", "bytes_per_second".
package logval

import (
	"fmt"
	"log/slog"
	"time"
)

// Bytes is a size in bytes.
type Bytes int64

// String is the size for people: "257.8 MiB".
func (b Bytes) String() string { return Format(int64(b)) }

// LogValue is the size as a number of bytes (JSON logs).
func (b Bytes) LogValue() slog.Value { return slog.Int64Value(int64(b)) }

// Rate is a speed in bytes per second.
type Rate int64

// String is the speed for people: "17.2 KiB/s".
func (r Rate) String() string { return Format(int64(r)) + "/s" }

// LogValue is the speed as a number of bytes per second (JSON logs).
func (r Rate) LogValue() slog.Value { return slog.Int64Value(int64(r)) }

// Seconds is a duration shown in seconds.
type Seconds time.Duration

// String is the duration in seconds with milliseconds: "1.250".
func (s Seconds) String() string { return fmt.Sprintf("%.3f", time.Duration(s).Seconds()) }

// LogValue is the duration as a number of seconds (JSON logs), to the millisecond.
func (s Seconds) LogValue() slog.Value {
	return slog.Float64Value(float64(time.Duration(s).Milliseconds()) / 1000)
}

// Format returns n bytes for people: "512 B", "4.0 KiB", "257.8 MiB".
func Format(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit && f > -unit {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	return fmt.Sprintf("%.1f PiB", f/unit)
}
