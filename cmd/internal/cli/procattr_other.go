//go:build !linux

package cli

import "syscall"

// childProcAttr: no special attributes outside Linux.
func childProcAttr() *syscall.SysProcAttr { return nil }
