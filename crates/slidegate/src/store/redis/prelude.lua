-- slidegate: one decision over one or more hits, all-or-nothing (see
-- store/memory/slot.rs, decide_all). Needs Redis 5 or later (scripts are
-- replicated by their effects, so TIME may precede writes).
--
-- KEYS: one per distinct (key, rule).
-- ARGV[1]: little-endian doubles, each an integer below 2^53 (so exact):
--   now (µs; negative: Redis' own clock), expiry margin (ms), hit count n;
--   then for one hit: code (its algorithm and its rule's options, see
--   codes.lua), limit, window (µs), cost; for several, per hit: key
--   index, code, limit, window, cost, asked (the cost to
--   check: the hit's cost plus those of earlier hits on the same key, 0 for
--   a probe), burst (the most that may pass at once: a GCRA rule's bucket,
--   else the limit).
-- Reply: little-endian doubles, per hit: allowed (1/0), remaining,
--   retry_after (µs), reset_after (µs). One sliding-log hit may answer an
--   integer instead (see sliding_log_one.lua).
--
-- Redis CPU per call is what this script is written for. The whole chunk
-- runs on every EVALSHA, and what costs is each redis.call (about as much
-- as the rest of a simple call), each number passed to one (formatted with
-- sprintf), each number parsed from text, each table and each closure. So
-- numbers travel as binary doubles (one struct.unpack, one struct.pack), the
-- common call (one sliding-log hit) runs inline before any function is
-- created, and command arguments are string literals where they can be.

local bunpack, bpack, format = struct.unpack, struct.pack, string.format

-- For one hit (with several, the last four are the first hit's key index,
-- code, limit and window, and unused).
local now, margin, n, code, L, W, cost = bunpack('<ddddddd', ARGV[1])
if now < 0 then
  local time = redis.call('TIME')
  now = time[1] * 1000000 + time[2]
end
