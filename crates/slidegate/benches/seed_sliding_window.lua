-- The seeds' sliding window (the classic recipe, for comparison only; not
-- used by slidegate). A sorted set per key, scores = time in ms, members
-- unique per request (a UUID in the seed), trimmed, counted, added:
--
--   KEYS[1] = the limiter's key
--   ARGV[1] = now (ms), ARGV[2] = window (ms), ARGV[3] = limit,
--   ARGV[4] = a unique member (UUID)
--
-- Kept as the seed wrote it, with PEXPIRE in place of EXPIRE in whole
-- seconds (the same cost). Its known bugs (an entry exactly W old is
-- dropped; the caller's clock) are the seeds', not slidegate's.
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local max_requests = tonumber(ARGV[3])
local member = ARGV[4]
local key = KEYS[1]

redis.call('ZREMRANGEBYSCORE', key, 0, now - window)

local count = redis.call('ZCARD', key)

if count < max_requests then
  redis.call('ZADD', key, now, member)
  redis.call('PEXPIRE', key, window + 1000)
  return 1
else
  return 0
end
