package lock

import "strings"

// prefixed names a companion key of lock name the way Redisson does, so that
// it shares the lock's hash slot: "prefix:{name}", or "prefix:name" when the
// name already carries a hash tag.
func prefixed(prefix, name string) string {
	if hasHashTag(name) {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

func hasHashTag(key string) bool {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return false
	}
	e := strings.IndexByte(key[s+1:], '}')
	return e > 0
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
