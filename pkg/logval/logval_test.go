package logval

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

func TestTextAndJSON(t *testing.T) {
	tests := []struct {
		name string
		v    any
		text string
		json any
	}{
		{"bytes", Bytes(270336000), "257.8 MiB", float64(270336000)},
		{"small bytes", Bytes(512), "512 B", float64(512)},
		{"rate", Rate(17613), "17.2 KiB/s", float64(17613)},
		{"seconds", Seconds(1250 * time.Millisecond), "1.250", 1.25},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.(interface{ String() string }).String(); got != tc.text {
				t.Errorf("text %q, want %q", got, tc.text)
			}
			var buf bytes.Buffer
			slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", "v", tc.v)
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatal(err)
			}
			if rec["v"] != tc.json {
				t.Errorf("JSON %v (%T), want %v", rec["v"], rec["v"], tc.json)
			}
		})
	}
}
