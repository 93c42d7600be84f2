package main

import "syscall"

// childProcAttr kills a server the demo starts when the demo dies, so a
// crashed or killed run leaves none behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
