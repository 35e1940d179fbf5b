package cli

import "syscall"

// childProcAttr puts a throwaway server in its own process group, so a
// Ctrl-C in the terminal reaches only this process (which then stops the
// server after the consumers), and has the kernel stop it if this process
// dies without cleaning up.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
