package lock

import "strings"

// prefixed names a companion key of lock name exactly as Redisson's
// prefixName does: "prefix:{name}" when the name contains no '{' at all, and
// "prefix:name" as soon as it contains one, whether or not that makes a valid
// hash tag. So for "a{b" or "a{}b" the companion keys do not share the
// lock's hash slot (on a cluster their scripts fail with CROSSSLOT, in Java
// as in Go), but both sides agree on every channel and key name.
func prefixed(prefix, name string) string {
	if strings.IndexByte(name, '{') >= 0 {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

// slot is the Redis Cluster hash slot of key (CRC16/XMODEM of its hash tag, mod 16384).
func slot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
