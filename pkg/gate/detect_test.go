package gate

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func readCorpus(t *testing.T, dir string) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "testdata", "smoke", dir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = string(b)
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestCorpora runs the detectors over every good and every bad answer of the corpora and
// reports the false-positive and false-negative counts; both must be 0.
func TestCorpora(t *testing.T) {
	good := readCorpus(t, "good")
	bad := readCorpus(t, "bad")
	if len(good) < 25 || len(bad) < 10 {
		t.Fatalf("corpora too small: %d good, %d bad", len(good), len(bad))
	}
	falsePos, falseNeg := 0, 0
	for _, name := range sortedKeys(good) {
		t.Run("good/"+name, func(t *testing.T) {
			if f := Detect(good[name]); f != nil {
				falsePos++
				t.Errorf("good answer flagged: %s", f)
			}
		})
	}
	for _, name := range sortedKeys(bad) {
		t.Run("bad/"+name, func(t *testing.T) {
			f := Detect(bad[name])
			if f == nil {
				falseNeg++
				t.Errorf("bad answer passed: %s", Sample(bad[name], 80))
				return
			}
			t.Logf("%s", f)
		})
	}
	t.Logf("corpus: %d good, %d bad; false positives %d, false negatives %d",
		len(good), len(bad), falsePos, falseNeg)
}

// TestGoodCorpusMargins shows how far the good corpus stays from each threshold, so that
// a change of thresholds can be judged against the data.
func TestGoodCorpusMargins(t *testing.T) {
	th := DefaultThresholds()
	var worst Stats
	worst.CompressRatio = 1
	for name, text := range readCorpus(t, "good") {
		s := th.Measure(text)
		worst.BadRunes = max(worst.BadRunes, s.BadRunes)
		worst.PunctRun = max(worst.PunctRun, s.PunctRun)
		worst.RulerRun = max(worst.RulerRun, s.RulerRun)
		worst.CharRun = max(worst.CharRun, s.CharRun)
		worst.SpaceRun = max(worst.SpaceRun, s.SpaceRun)
		worst.ShortNgramReps = max(worst.ShortNgramReps, s.ShortNgramReps)
		worst.LongNgramReps = max(worst.LongNgramReps, s.LongNgramReps)
		if s.CompressRatio > 0 && s.CompressRatio < worst.CompressRatio {
			worst.CompressRatio = s.CompressRatio
			t.Logf("lowest compression ratio so far: %s %.3f", name, s.CompressRatio)
		}
	}
	t.Logf("good corpus worst case: %+v", worst)
	t.Logf("thresholds:             %+v", th)
	checks := []struct {
		name       string
		seen, max_ float64
	}{
		{"bad runes", float64(worst.BadRunes), float64(th.MaxBadRunes)},
		{"punct run", float64(worst.PunctRun), float64(th.MaxPunctRun)},
		{"ruler run", float64(worst.RulerRun), float64(th.MaxRulerRun)},
		{"char run", float64(worst.CharRun), float64(th.MaxCharRun)},
		{"space run", float64(worst.SpaceRun), float64(th.MaxSpaceRun)},
		{"short n-gram reps", float64(worst.ShortNgramReps), float64(th.ShortNgramReps - 1)},
		{"long n-gram reps", float64(worst.LongNgramReps), float64(th.LongNgramReps - 1)},
	}
	for _, c := range checks {
		if c.seen > c.max_ {
			t.Errorf("%s: good corpus reaches %v, above the limit %v", c.name, c.seen, c.max_)
		}
	}
	if worst.CompressRatio < th.MinCompressRatio*1.5 {
		t.Errorf("compression: good corpus reaches %.3f, too close to the limit %.3f", worst.CompressRatio, th.MinCompressRatio)
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		detector string // "" when the text must pass
	}{
		{"empty", "", ""},
		{"one word", "4", ""},
		{"seed bang", strings.Repeat("!", 200), DetectorPunctRun},
		{"ten bangs", strings.Repeat("!", 10), DetectorPunctRun},
		{"three bangs", "Wow!!!", ""},
		{"plus", strings.Repeat("+", 50), DetectorPunctRun},
		{"comma bang", " , , (" + strings.Repeat("!", 100), DetectorPunctRun},
		{"apostrophe s", strings.Repeat("'s", 30), DetectorNgram},
		{"the the", strings.Repeat("the ", 20), DetectorNgram},
		{"powers of two", "2^10 = 2 · 2 · 2 · 2 · 2 · 2 · 2 · 2 · 2 · 2 = 1024", ""},
		{"very very very", "It was very, very, very good.", ""},
		{"ruler 80", "# " + strings.Repeat("-", 78), ""},
		{"ruler too long", strings.Repeat("=", 300), DetectorPunctRun},
		{"markdown separator", "|" + strings.Repeat("---|", 12), ""},
		{"replacement", "ab\ufffd\ufffd\ufffdcd", DetectorBadRunes},
		{"one replacement in long text", "The capital of France is Paris, a city on the Seine known for its museums, its cafes and the Eiffel Tower. \ufffd", ""},
		{"nul", "a\x00b", DetectorBadRunes},
		{"newlines and tabs", "a\n\tb\r\nc", ""},
		{"letter run", strings.Repeat("a", 40), DetectorCharRun},
		{"hex mask", "0xFFFFFFFF", ""},
		{"sentence loop", strings.Repeat("The capital is Paris. ", 6), DetectorNgram},
		{"space flood", "4" + strings.Repeat(" ", 400), DetectorCharRun},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Detect(tt.text)
			switch {
			case tt.detector == "" && f != nil:
				t.Errorf("Detect(%s) = %s, want nil", Sample(tt.text, 60), f)
			case tt.detector != "" && f == nil:
				t.Errorf("Detect(%s) = nil, want %s", Sample(tt.text, 60), tt.detector)
			case tt.detector != "" && f.Detector != tt.detector:
				t.Errorf("Detect(%s) = %s, want detector %s", Sample(tt.text, 60), f, tt.detector)
			}
		})
	}
}

func TestCompressionOnlyOnLongText(t *testing.T) {
	th := DefaultThresholds()
	short := strings.Repeat("ab", 10)
	if s := th.Measure(short); s.CompressRatio != 0 {
		t.Errorf("short text measured a compression ratio %.3f", s.CompressRatio)
	}
	// A loop whose period is too long for the n-gram detector, but compresses like no language.
	var b strings.Builder
	for i := range 40 {
		b.WriteString("In summary the function works for every input we tried; see example ")
		b.WriteByte(byte('0' + i%3))
		b.WriteString(" above and the notes below it. ")
	}
	f := th.Detect(b.String())
	if f == nil || f.Detector != DetectorCompression {
		t.Errorf("long loop: got %v, want %s", f, DetectorCompression)
	}
}
