package daemon

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/buildinfo"
)

// sglprov_build_info carries the labels `sglprov version` prints, on the metrics endpoint.
func TestBuildInfoMetric(t *testing.T) {
	m := NewMetrics()
	addr, stop, err := m.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	info := buildinfo.Read()
	var line string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "sglprov_build_info{") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no sglprov_build_info in:\n%s", body)
	}
	if !strings.HasSuffix(line, "} 1") {
		t.Errorf("want value 1: %s", line)
	}
	for k, v := range info.Labels() {
		if !strings.Contains(line, k+`="`+v+`"`) {
			t.Errorf("label %s=%q missing: %s", k, v, line)
		}
	}
}
