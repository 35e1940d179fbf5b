//go:build race

package integration_test

// raceBuildFlags builds the pelwarden binary with the race detector when the
// tests run with it.
var raceBuildFlags = []string{"-race"}
