-- A client leaves the line of waiters (its last waiter gave up).
-- KEYS[1] queue of waiting clients, KEYS[2] their deadlines; ARGV[1] clientID
redis.call('lrem', KEYS[1], 0, ARGV[1])
redis.call('zrem', KEYS[2], ARGV[1])
return 1
