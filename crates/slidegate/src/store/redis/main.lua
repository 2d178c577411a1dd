-- slidegate: one decision over several hits, all-or-nothing (see
-- store/memory/slot.rs, decide_all).
--
-- KEYS: one per distinct (key, rule).
-- ARGV: now (µs; empty: Redis' own clock), expiry margin (ms), hit count,
--       then per hit: key index, algorithm (0 sliding_log, 1 sliding_counter,
--       2 fixed_window, 3 gcra), limit, window (µs), cost, asked (the cost
--       to check: the hit's cost plus those of earlier hits on the same key,
--       0 for a probe).
-- Returns per hit: allowed (1/0), limit, remaining, retry_after (µs),
--       reset_after (µs).

local ALGORITHMS = { [0] = sliding_log, sliding_counter, fixed_window, gcra }

local now = tonumber(ARGV[1])
if not now then
  -- Effects replication, so TIME may precede writes (needed before Redis 5).
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local margin = tonumber(ARGV[2])

local hits, states = {}, {}
for i = 1, tonumber(ARGV[3]) do
  local at = 3 + (i - 1) * 6
  local hit = {
    key = tonumber(ARGV[at + 1]),
    algorithm = ALGORITHMS[tonumber(ARGV[at + 2])],
    limit = tonumber(ARGV[at + 3]),
    window = tonumber(ARGV[at + 4]),
    cost = tonumber(ARGV[at + 5]),
    asked = tonumber(ARGV[at + 6]),
  }
  local st = states[hit.key]
  if not st then
    st = hit.algorithm.load(KEYS[hit.key], hit.limit, hit.window)
    st.algorithm = hit.algorithm
    states[hit.key] = st
  end
  -- As in the memory store, a hit that consumes keeps its state even when
  -- the decision is denied; probes never create one.
  if hit.cost > 0 then
    st.touched = true
  end
  hits[i] = hit
end

local decisions, all_allowed = {}, true
for i, hit in ipairs(hits) do
  decisions[i] = hit.algorithm.check(states[hit.key], now, hit.asked)
  if decisions[i][1] == 0 then
    all_allowed = false
  end
end

for i, hit in ipairs(hits) do
  if hit.cost > 0 then
    if all_allowed then
      hit.algorithm.record(states[hit.key], now, hit.cost)
    elseif decisions[i][1] == 1 then
      -- Nothing is recorded: the hits that would have passed report the state.
      decisions[i] = hit.algorithm.check(states[hit.key], now, 0)
    end
  end
end

for _, st in pairs(states) do
  if st.dirty and (st.existed or st.touched) then
    st.algorithm.save(st, now, margin)
  end
end

local reply = {}
for i = 1, #hits do
  for j = 1, 5 do
    reply[#reply + 1] = decisions[i][j]
  end
end
return reply
