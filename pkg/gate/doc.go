// Package gate is the correctness gate: it waits for an SGLang server to get ready, asks
// it a few questions with known answers, and fails when the answers are wrong, missing or
// degenerate (the detectors in this package: runs of one character, repeated n-grams,
// replacement and control characters, text that compresses far better than language).
package gate
