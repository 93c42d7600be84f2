//go:build !linux

package main

import "syscall"

// childProcAttr is nil off Linux: a crashed run may leave its servers.
func childProcAttr() *syscall.SysProcAttr { return nil }
