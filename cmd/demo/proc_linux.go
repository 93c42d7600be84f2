package main

import "syscall"

// childProcAttr kills a server the demo starts when the demo dies, so a
// crashed or killed run leaves none behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// openFileLimit is the process's RLIMIT_NOFILE (soft; Go raises it to the
// hard one at start-up), 0 if unknown.
func openFileLimit() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	return l.Cur
}
