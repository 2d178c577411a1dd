-- slidegate: the driver of every call but a single sliding-log hit: one hit
-- of another algorithm, or several hits decided all-or-nothing (several
-- rules of one key, or the descriptors of one request).

local BUILDERS = { [0] = build_sliding_log, build_sliding_counter, build_fixed_window, build_gcra }
local built = {}

local function build(algorithm_code)
  local algorithm = built[algorithm_code]
  if not algorithm then
    algorithm = BUILDERS[algorithm_code]()
    built[algorithm_code] = algorithm
  end
  return algorithm
end

if n == 1 then
  local algorithm = build(code)
  local st = algorithm.load(1, L, W)
  local allowed, _, remaining, retry, reset = algorithm.check(st, now, cost)
  if allowed == 1 and cost > 0 then
    algorithm.record(st, now, cost)
  end
  if st.dirty and (st.existed or cost > 0) then
    algorithm.save(st, now, margin)
  end
  return bpack('<dddd', allowed, remaining, retry, reset)
end

-- Per hit, in parallel arrays (tables cost Redis CPU): its state, cost and
-- checked cost. States are loaded once per key.
local spec = ARGV[1]
local state, costs, askeds, states = {}, {}, {}, {}
for i = 1, n do
  local key, algorithm_code, limit, window, c, a = bunpack('<dddddd', spec, 25 + 48 * (i - 1))
  local st = states[key]
  if not st then
    local algorithm = build(algorithm_code)
    st = algorithm.load(key, limit, window)
    st.algorithm = algorithm
    states[key] = st
  end
  state[i], costs[i], askeds[i] = st, c, a
  -- As in the memory store, a hit that consumes keeps its state even when
  -- the decision is denied; probes never create one.
  if c > 0 then
    st.touched = true
  end
end

-- The reply: four numbers per hit (allowed, remaining, retry_after,
-- reset_after), filled in place.
local reply, all_allowed = {}, true
local function decide(i, c)
  local st = state[i]
  local j = 4 * (i - 1)
  local _
  reply[j + 1], _, reply[j + 2], reply[j + 3], reply[j + 4] = st.algorithm.check(st, now, c)
end
for i = 1, n do
  decide(i, askeds[i])
  if reply[4 * i - 3] == 0 then
    all_allowed = false
  end
end

for i = 1, n do
  if costs[i] > 0 then
    if all_allowed then
      state[i].algorithm.record(state[i], now, costs[i])
    elseif reply[4 * i - 3] == 1 then
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

return bpack('<' .. string.rep('d', 4 * n), unpack(reply))
