//go:build !linux

package integration_test

import "syscall"

// chaosProcAttr: only Linux can tie a child's life to its parent's; the
// fleet's cleanup kills the consumers elsewhere.
func chaosProcAttr() *syscall.SysProcAttr { return nil }
