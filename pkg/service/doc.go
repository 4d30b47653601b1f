// Package service renders systemd units for the SGLang server and installs and starts them
// through a Manager: systemd over D-Bus, offline files under a --root, or a supervised
// child process for hosts without systemd.
//
// # Values in a unit
//
// Every value that reaches a unit goes through one of the quoting helpers the templates
// call (exec, env, escape), and Render checks every value of Data before the template runs.
// The rules, which follow how systemd reads a unit file:
//
//   - Control characters (bytes below 0x20, including tab, newline, carriage return and NUL,
//     and DEL) are refused in every value: a unit is line based and no quoting carries a
//     newline through every directive. Invalid UTF-8 is refused too (systemd ignores such
//     lines).
//   - "%" is escaped as "%%" everywhere (systemd expands specifiers in ExecStart=,
//     Environment=, Description=, User=, WorkingDirectory=).
//   - In ExecStart=, "$" is escaped as "$$" (systemd expands $VAR and ${VAR} there), and an
//     argument is wrapped in double quotes, with "\" and `"` escaped by a backslash, when it
//     is empty or contains whitespace, a quote, a backslash, or is a lone ";" (a command
//     separator). Any printable text is carried this way, unbalanced quotes included.
//   - The executable (the first word of ExecStart=) must be an absolute path or a bare file
//     name without quotes or backslashes (systemd refuses those), and must not start with
//     one of systemd's prefix characters (-, @, :, +, !).
//   - In Environment=, each assignment is written as "KEY=VALUE" in double quotes with "\"
//     and `"` escaped; "$" is literal there. Keys must be shell-style names
//     ([A-Za-z_][A-Za-z0-9_]*).
//   - Scalar values a template writes directly (Recipe, Unit, profile name, User,
//     WorkingDirectory, ModelPath, Host) must not start with "[": placed at the start of a
//     line it would read as a section header.
//
// After rendering, the unit is checked line by line: each line is blank, a comment, a
// section header ([Unit], [Service], [Install] or an X- section, each at most once) or a
// KEY=VALUE assignment. A value that breaks this is refused with an error that wraps
// exitcode.ErrUsage and names the value.
package service
