package lock

// ScriptKind names the script that a EVAL or EVALSHA argument (source or
// SHA1) belongs to, or "" when it is none of ours.
func ScriptKind(arg string) string {
	for kind, s := range map[string]*struct{ src, sha string }{
		"acquire":  {acquireSrc, acquireScript.Hash()},
		"reenter":  {reenterSrc, reenterScript.Hash()},
		"release":  {releaseSrc, releaseScript.Hash()},
		"renew":    {renewSrc, renewScript.Hash()},
		"force":    {forceSrc, forceScript.Hash()},
		"leave":    {leaveSrc, leaveScript.Hash()},
		"transfer": {transferSrc, transferScript.Hash()},
	} {
		if arg == s.src || arg == s.sha {
			return kind
		}
	}
	return ""
}

// Waiting returns how many waiters of c are in line for the lock name.
func Waiting(c *Client, name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ln := c.lines[name]; ln != nil {
		return len(ln.waiters)
	}
	return 0
}
