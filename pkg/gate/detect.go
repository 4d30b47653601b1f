package gate

import (
	"bytes"
	"compress/flate"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Detector names, as they appear in a Finding.
const (
	// DetectorBadRunes flags text with a high share of U+FFFD or control characters.
	DetectorBadRunes = "bad-runes"
	// DetectorPunctRun flags a run of one punctuation or symbol character.
	DetectorPunctRun = "punct-run"
	// DetectorCharRun flags one letter, digit or other character repeated far beyond language.
	DetectorCharRun = "char-run"
	// DetectorNgram flags a short n-gram repeated back to back far beyond language.
	DetectorNgram = "repeat-ngram"
	// DetectorCompression flags text that compresses far better than language does.
	DetectorCompression = "compression"
)

// Finding says why a text is degenerate: which detector fired and what it saw.
type Finding struct {
	// Detector is one of the Detector* names.
	Detector string `json:"detector"`
	// Detail describes what was found, e.g. `"!" repeated 200 times`.
	Detail string `json:"detail"`
}

// String returns "detector: detail".
func (f Finding) String() string { return f.Detector + ": " + f.Detail }

// Thresholds are the limits of the detectors. The defaults were chosen from the corpora
// under testdata/smoke: every good answer there stays well inside them, every known
// failure goes beyond at least one.
type Thresholds struct {
	// MaxBadRunes and MaxBadRuneShare: text with more U+FFFD/control characters (other than
	// \n, \t, \r) than MaxBadRunes, or a share of them above MaxBadRuneShare, is degenerate.
	MaxBadRunes     int
	MaxBadRuneShare float64
	// MaxPunctRun is the longest allowed run of one punctuation or symbol character;
	// MaxRulerRun the same for ruler characters (- = _ * # ~ . and box drawing), which
	// code and markdown use for separators.
	MaxPunctRun, MaxRulerRun int
	// MaxCharRun is the longest allowed run of one letter, digit or other non-space rune.
	MaxCharRun int
	// MaxSpaceRun is the longest allowed run of one whitespace rune.
	MaxSpaceRun int
	// MaxNgram is the longest n-gram period examined (in runes). Short n-grams (period up
	// to ShortNgram) are degenerate when repeated back to back at least ShortNgramReps
	// times over at least ShortNgramRunes runes; longer ones at least LongNgramReps times
	// over at least LongNgramRunes runes. Units made only of ruler characters, '|', '+',
	// ':' and spaces (table and ASCII-art separators) are allowed up to MaxRulerNgramRunes.
	MaxNgram, ShortNgram            int
	ShortNgramReps, ShortNgramRunes int
	LongNgramReps, LongNgramRunes   int
	MaxRulerNgramRunes              int
	// MinCompressBytes is the shortest text (in bytes) the compression detector looks at;
	// below it, flate's own overhead makes the ratio meaningless. Text whose
	// compressed/original ratio is below MinCompressRatio is degenerate.
	MinCompressBytes int
	MinCompressRatio float64
}

// DefaultThresholds returns the thresholds used by Detect.
func DefaultThresholds() Thresholds {
	return Thresholds{
		MaxBadRunes:        2,
		MaxBadRuneShare:    0.02,
		MaxPunctRun:        9,
		MaxRulerRun:        160,
		MaxCharRun:         32,
		MaxSpaceRun:        120,
		MaxNgram:           32,
		ShortNgram:         8,
		ShortNgramReps:     16,
		ShortNgramRunes:    32,
		LongNgramReps:      5,
		LongNgramRunes:     80,
		MaxRulerNgramRunes: 240,
		MinCompressBytes:   400,
		MinCompressRatio:   0.12,
	}
}

// Detect reports whether text is degenerate under the default thresholds; it returns nil
// for text that looks like language (or code, tables, math).
func Detect(text string) *Finding {
	return DefaultThresholds().Detect(text)
}

// Detect reports whether text is degenerate under t: the first detector that fires, or nil.
func (t Thresholds) Detect(text string) *Finding {
	if text == "" {
		return nil
	}
	runes := []rune(text)
	for _, check := range []func([]rune) *Finding{t.badRunes, t.runs, t.ngrams} {
		if f := check(runes); f != nil {
			return f
		}
	}
	return t.compression(text)
}

// Stats are the measures the detectors compare with their thresholds; tests use them to
// show the margin between the good corpus and the limits.
type Stats struct {
	BadRunes       int
	BadRuneShare   float64
	PunctRun       int
	RulerRun       int
	CharRun        int
	SpaceRun       int
	ShortNgramReps int // most back-to-back repetitions of a short n-gram
	LongNgramReps  int // most back-to-back repetitions of a long n-gram (period > ShortNgram)
	CompressRatio  float64
}

// Measure returns the detectors' measures of text under t (CompressRatio is 0 when the
// text is too short for the ratio to mean anything).
func (t Thresholds) Measure(text string) Stats {
	runes := []rune(text)
	var s Stats
	s.BadRunes = countBad(runes)
	if len(runes) > 0 {
		s.BadRuneShare = float64(s.BadRunes) / float64(len(runes))
	}
	forEachRun(runes, func(r rune, n int) {
		switch classify(r) {
		case classSpace:
			s.SpaceRun = max(s.SpaceRun, n)
		case classRuler:
			s.RulerRun = max(s.RulerRun, n)
		case classPunct:
			s.PunctRun = max(s.PunctRun, n)
		default:
			s.CharRun = max(s.CharRun, n)
		}
	})
	t.forEachRepeat(runes, func(p, start, length int) {
		if unit := runes[start : start+p]; isRulerUnit(unit) || !primitive(unit) {
			return
		}
		if p <= t.ShortNgram {
			s.ShortNgramReps = max(s.ShortNgramReps, length/p)
		} else {
			s.LongNgramReps = max(s.LongNgramReps, length/p)
		}
	})
	if len(text) >= t.MinCompressBytes {
		s.CompressRatio = compressRatio(text)
	}
	return s
}

func isBad(r rune) bool {
	if r == utf8.RuneError {
		return true
	}
	if r == '\n' || r == '\t' || r == '\r' {
		return false
	}
	return unicode.IsControl(r)
}

func countBad(runes []rune) int {
	n := 0
	for _, r := range runes {
		if isBad(r) {
			n++
		}
	}
	return n
}

func (t Thresholds) badRunes(runes []rune) *Finding {
	n := countBad(runes)
	if n == 0 {
		return nil
	}
	share := float64(n) / float64(len(runes))
	if n > t.MaxBadRunes || share > t.MaxBadRuneShare {
		return &Finding{DetectorBadRunes, fmt.Sprintf("%d of %d characters are U+FFFD or control characters (%.0f%%)",
			n, len(runes), 100*share)}
	}
	return nil
}

type runeClass int

const (
	classOther runeClass = iota
	classSpace
	classRuler
	classPunct
)

func isRuler(r rune) bool {
	switch r {
	case '-', '=', '_', '*', '#', '~', '.', '—', '–', '…', '・', '·':
		return true
	}
	return r >= 0x2500 && r <= 0x257F // box drawing
}

func classify(r rune) runeClass {
	switch {
	case unicode.IsSpace(r):
		return classSpace
	case isRuler(r):
		return classRuler
	case unicode.IsPunct(r) || unicode.IsSymbol(r):
		return classPunct
	}
	return classOther
}

// forEachRun calls fn for every maximal run of one rune.
func forEachRun(runes []rune, fn func(r rune, n int)) {
	for i := 0; i < len(runes); {
		j := i + 1
		for j < len(runes) && runes[j] == runes[i] {
			j++
		}
		fn(runes[i], j-i)
		i = j
	}
}

func (t Thresholds) runs(runes []rune) *Finding {
	var found *Finding
	forEachRun(runes, func(r rune, n int) {
		if found != nil {
			return
		}
		switch classify(r) {
		case classSpace:
			if n > t.MaxSpaceRun {
				found = &Finding{DetectorCharRun, fmt.Sprintf("%s repeated %d times", quoteRune(r), n)}
			}
		case classRuler:
			if n > t.MaxRulerRun {
				found = &Finding{DetectorPunctRun, fmt.Sprintf("%s repeated %d times", quoteRune(r), n)}
			}
		case classPunct:
			if n > t.MaxPunctRun {
				found = &Finding{DetectorPunctRun, fmt.Sprintf("%s repeated %d times", quoteRune(r), n)}
			}
		default:
			if n > t.MaxCharRun {
				found = &Finding{DetectorCharRun, fmt.Sprintf("%s repeated %d times", quoteRune(r), n)}
			}
		}
	})
	return found
}

// isRulerUnit reports whether a repeated unit is separator art: ruler characters, '|',
// '+', ':' and spaces only, with at least one ruler character.
func isRulerUnit(unit []rune) bool {
	ruler := false
	for _, r := range unit {
		switch {
		case isRuler(r):
			ruler = true
		case r == '|' || r == '+' || r == ':' || r == ' ':
		default:
			return false
		}
	}
	return ruler
}

// forEachRepeat calls fn for every maximal stretch of runes that repeats with period p
// (2 <= p <= MaxNgram): runes[i] == runes[i+p] over the stretch. length is the number of
// runes the stretch covers, including its first unit.
func (t Thresholds) forEachRepeat(runes []rune, fn func(p, start, length int)) {
	for p := 2; p <= t.MaxNgram; p++ {
		for i := 0; i+p < len(runes); {
			if runes[i] != runes[i+p] {
				i++
				continue
			}
			j := i
			for j+p < len(runes) && runes[j] == runes[j+p] {
				j++
			}
			fn(p, i, j-i+p)
			i = j + 1
		}
	}
}

// primitive reports whether unit is not itself a repetition of a shorter unit (so that
// "!!" is left to the run detectors and "abab" to period 2).
func primitive(unit []rune) bool {
	n := len(unit)
	for d := 1; d < n; d++ {
		if n%d != 0 {
			continue
		}
		rep := true
		for i := d; i < n; i++ {
			if unit[i] != unit[i-d] {
				rep = false
				break
			}
		}
		if rep {
			return false
		}
	}
	return true
}

func (t Thresholds) ngrams(runes []rune) *Finding {
	var found *Finding
	t.forEachRepeat(runes, func(p, start, length int) {
		if found != nil {
			return
		}
		unit := runes[start : start+p]
		if !primitive(unit) {
			return
		}
		reps := length / p
		if isRulerUnit(unit) {
			if length > t.MaxRulerNgramRunes {
				found = &Finding{DetectorNgram, fmt.Sprintf("%s repeated %d times", strconv.Quote(string(unit)), reps)}
			}
			return
		}
		short := p <= t.ShortNgram
		if (short && reps >= t.ShortNgramReps && length >= t.ShortNgramRunes) ||
			(!short && reps >= t.LongNgramReps && length >= t.LongNgramRunes) {
			found = &Finding{DetectorNgram, fmt.Sprintf("%s repeated %d times", strconv.Quote(string(unit)), reps)}
		}
	})
	return found
}

func compressRatio(text string) float64 {
	var buf bytes.Buffer
	w, err := flate.NewWriter(&buf, flate.BestCompression)
	if err != nil {
		return 1
	}
	_, _ = w.Write([]byte(text))
	_ = w.Close()
	return float64(buf.Len()) / float64(len(text))
}

func (t Thresholds) compression(text string) *Finding {
	if len(text) < t.MinCompressBytes {
		return nil
	}
	if r := compressRatio(text); r < t.MinCompressRatio {
		return &Finding{DetectorCompression, fmt.Sprintf("%d bytes compress to %.1f%% (language stays above %.0f%%)",
			len(text), 100*r, 100*t.MinCompressRatio)}
	}
	return nil
}

func quoteRune(r rune) string {
	return strconv.QuoteRune(r)
}
