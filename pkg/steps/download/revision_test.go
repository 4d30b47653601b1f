package download

import (
	"strings"
	"testing"
)

func TestRevisionWarning(t *testing.T) {
	for _, rev := range []string{"", "main", "v1.0", "refs/pr/3", "0368c1b3"} {
		w := RevisionWarning("nvidia/Qwen3.5-397B-A17B-NVFP4", rev)
		want := rev
		if want == "" {
			want = "main"
		}
		if !strings.Contains(w, `revision "`+want+`" of nvidia/Qwen3.5-397B-A17B-NVFP4 is a branch or tag`) ||
			!strings.Contains(w, "/api/models/nvidia/Qwen3.5-397B-A17B-NVFP4/revision/"+want) {
			t.Errorf("RevisionWarning(%q) = %q", rev, w)
		}
	}
	if w := RevisionWarning("nvidia/x", "0368c1b3233414cd4a617b8ff9515e25752dc16c"); w != "" {
		t.Errorf("a 40-hex commit is warned about: %q", w)
	}
}
