//go:build !linux

package main

import "syscall"

// childProcAttr is nil off Linux: a crashed run may leave its servers.
func childProcAttr() *syscall.SysProcAttr { return nil }

// openFileLimit is 0, unknown, off Linux.
func openFileLimit() uint64 { return 0 }
