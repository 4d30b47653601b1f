// Package e2e holds the end-to-end tests that drive sglprov against a real systemd: a
// debootstrapped Debian bookworm root, cached between runs, booted with systemd-nspawn in a
// fresh copy per test and driven with nsenter. The tests run only with the -e2e flag
// (go test ./test/e2e -e2e), as root, with debootstrap and systemd-nspawn installed; see
// README.md in this folder.
package e2e
