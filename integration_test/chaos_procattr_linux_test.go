package integration_test

import "syscall"

// chaosProcAttr has the kernel kill a consumer subprocess when the test
// process dies without cleaning up (a timeout's panic, a SIGKILL).
func chaosProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
