//go:build !linux

package fleet

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }

// peakRSS is unknown off Linux; the report falls back to the RSS from /metrics.
func peakRSS(int) int64 { return 0 }
