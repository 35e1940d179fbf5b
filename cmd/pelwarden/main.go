// Command pelwarden runs the pelwarden demo and the operator commands for
// Redis Streams consumer groups: status, poison, dlq, reap, load and bench.
// Run `pelwarden --help` for the list; the commands live in package
// cmd/internal/cli.
package main

import (
	"os"

	"github.com/pelwarden/pelwarden/cmd/internal/cli"
)

func main() {
	os.Exit(cli.Execute(os.Args[1:], os.Stdout, os.Stderr))
}
