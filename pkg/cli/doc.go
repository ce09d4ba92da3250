// Package cli is what mount-apiserver and mount-agent share as commands: help that lists the
// subcommands with the grouped flags, --version and the version subcommand, and errors printed
// as plain "Error: ..." lines rather than log lines.
package cli
