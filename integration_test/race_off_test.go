//go:build !race

package integration_test

// raceBuildFlags: the tests run without the race detector.
var raceBuildFlags []string
