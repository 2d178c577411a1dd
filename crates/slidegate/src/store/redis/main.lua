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

local BUILDERS = { [0] = build_sliding_log, build_sliding_counter, build_fixed_window, build_gcra }
local built = {}

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
local n = tonumber(ARGV[3])

local function build(code)
  local algorithm = built[code]
  if not algorithm then
    algorithm = BUILDERS[code]()
    built[code] = algorithm
  end
  return algorithm
end

if n == 1 then
  -- One hit (most calls): the same steps without the bookkeeping of a batch.
  local algorithm = build(tonumber(ARGV[5]))
  local st = algorithm.load(KEYS[1], tonumber(ARGV[6]), tonumber(ARGV[7]))
  local cost = tonumber(ARGV[8])
  local allowed, limit, remaining, retry, reset = algorithm.check(st, now, tonumber(ARGV[9]))
  if allowed == 1 and cost > 0 then
    algorithm.record(st, now, cost)
  end
  if st.dirty and (st.existed or cost > 0) then
    algorithm.save(st, now, margin)
  end
  return { allowed, limit, remaining, retry, reset }
end

-- Per hit, in parallel arrays (tables cost Redis CPU): its state, cost and
-- checked cost. States are loaded once per key.
local state, cost, asked, states = {}, {}, {}, {}
for i = 1, n do
  local at = 3 + (i - 1) * 6
  local key = tonumber(ARGV[at + 1])
  local st = states[key]
  if not st then
    local algorithm = build(tonumber(ARGV[at + 2]))
    st = algorithm.load(KEYS[key], tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4]))
    st.algorithm = algorithm
    states[key] = st
  end
  state[i], cost[i], asked[i] = st, tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6])
  -- As in the memory store, a hit that consumes keeps its state even when
  -- the decision is denied; probes never create one.
  if cost[i] > 0 then
    st.touched = true
  end
end

-- The reply: five numbers per hit (allowed, limit, remaining, retry_after,
-- reset_after), filled in place.
local reply, all_allowed = {}, true
local function decide(i, c)
  local st = state[i]
  local j = 5 * (i - 1)
  reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4], reply[j + 5] = st.algorithm.check(st, now, c)
end
for i = 1, n do
  decide(i, asked[i])
  if reply[5 * i - 4] == 0 then
    all_allowed = false
  end
end

for i = 1, n do
  if cost[i] > 0 then
    if all_allowed then
      state[i].algorithm.record(state[i], now, cost[i])
    elseif reply[5 * i - 4] == 1 then
      -- Nothing is recorded: the hits that would have passed report the state.
      decide(i, 0)
    end
  end
end

for _, st in pairs(states) do
  if st.dirty and (st.existed or st.touched) then
    st.algorithm.save(st, now, margin)
  end
end

return reply
