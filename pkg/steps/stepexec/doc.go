// Package stepexec runs a step's child command: looked up on the PATH of the environment
// it gets, in its own process group killed as a whole when the run ends, its output to the
// step log and read in bounded lines, its progress on the console, and on failure its last
// lines. The build, packages, command and allreduce step kinds share it, so no step kind
// imports another.
package stepexec
