-- slidegate: the driver of every call but a single sliding-log hit: one hit
-- of another algorithm, or several hits decided all-or-nothing (several
-- rules of one key, or the descriptors of one request).
--
-- A decision over keys in several Redis Cluster slots is made slot by slot
-- (see cross_slot.rs), with three more modes, told by a negative hit count
-- -(mode * 2^20 + hits), each on the batch layout of the spec followed by
-- the journal's lifetime (ms), with the journal's key last in KEYS:
--
--   1 record: decide and record as usual, unless the journal key exists
--     (the decision was undone before this call ran: nothing is done); when
--     recorded, write the journal: per state, what was added, so that
--     exactly that can be taken back.
--   2 check: decide without recording anything, as when another part of
--     the batch denies (hits that would pass report their state).
--   3 undo: take back what the journal says was recorded, if it is still
--     there; then leave a tombstone in its place, so the undo is done once
--     however often it is sent and a record call that had not run yet
--     never will; then answer as a check.
--
-- and a fifth, on one slot, with the batch layout followed by the longest
-- wait (µs) in place of the journal's lifetime, and no journal key:
--
--   5 reserve: when the hits do not all fit now, find the earliest time
--     they do (now plus the longest retry_after of a check at now: usage
--     only falls as time passes while nothing is admitted) and, if that is
--     within the longest wait, record every hit at that time (see
--     store/memory/reserve.rs). The reply is that of a batch followed by
--     one more number: the wait (µs), or -1 when nothing was recorded.

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

local mode = 0
if n < 0 then
  mode = math.floor(-n / 1048576)
  n = -n % 1048576
end

if mode == 0 and n == 1 then
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

-- One decision over the hits of `spec` from byte `at` (n hits of six
-- numbers, then the journal's lifetime for a step), with mode `mode`; its
-- keys are KEYS[base + 1 .. base + nkeys], the journal's last. Key indices
-- in the spec and in the journal are relative to base, so a journal
-- written by one call is read right by another that places the decision
-- elsewhere in KEYS (a coalesced call, see batch.lua).
local function decide(spec, at, n, mode, base, nkeys)
  -- Per hit, in parallel arrays (tables cost Redis CPU): its state, cost
  -- and checked cost. States are loaded once per key.
  local journal, lifetime, max_wait
  if mode == 5 then
    max_wait = bunpack('<d', spec, at + 48 * n)
  elseif mode > 0 then
    journal = KEYS[base + nkeys]
    lifetime = format('%d', bunpack('<d', spec, at + 48 * n))
  end
  if mode == 1 and redis.call('EXISTS', journal) == 1 then
    return redis.error_reply('CANCELLED this decision was undone before it ran')
  end
  if mode == 3 then
    -- Per state recorded: KEYS index, algorithm, limit, window, mark, cost.
    local entries = redis.call('GET', journal)
    if entries and #entries > 1 then
      for from = 1, #entries, 48 do
        local index, algorithm_code, limit, window, mark, added = bunpack('<dddddd', entries, from)
        local algorithm = build(algorithm_code)
        local st = algorithm.load(base + index, limit, window)
        if st.existed then
          algorithm.undo(st, now, margin, mark, added)
        end
      end
    end
    redis.call('SET', journal, 'x', 'PX', lifetime)
    mode = 2
  end

  local state, costs, askeds, states = {}, {}, {}, {}
  for i = 1, n do
    local key, algorithm_code, limit, window, c, a = bunpack('<dddddd', spec, at + 48 * (i - 1))
    local st = states[key]
    if not st then
      local algorithm = build(algorithm_code)
      st = algorithm.load(base + key, limit, window)
      st.algorithm, st.code = algorithm, algorithm_code
      states[key] = st
    end
    state[i], costs[i], askeds[i] = st, c, a
    -- As in the memory store, a hit that consumes keeps its state even
    -- when the decision is denied; probes never create one.
    if c > 0 then
      st.touched = true
    end
  end

  -- The reply: four numbers per hit (allowed, remaining, retry_after,
  -- reset_after), filled in place.
  local reply, all_allowed = {}, mode ~= 2
  local function check(i, c)
    local st = state[i]
    local j = 4 * (i - 1)
    local _
    reply[j + 1], _, reply[j + 2], reply[j + 3], reply[j + 4] = st.algorithm.check(st, now, c)
  end
  for i = 1, n do
    check(i, askeds[i])
    if reply[4 * i - 3] == 0 then
      all_allowed = false
    end
  end

  -- A reservation: the time every hit fits, if within the longest wait.
  local at_time, waited = now, -1
  if mode == 5 then
    if all_allowed then
      waited = 0
    else
      local wait = 0
      for i = 1, n do
        if reply[4 * i - 1] > wait then
          wait = reply[4 * i - 1]
        end
      end
      if wait <= max_wait then
        all_allowed, at_time, waited = true, now + wait, wait
      end
    end
  end

  for i = 1, n do
    if costs[i] > 0 then
      if all_allowed then
        local st = state[i]
        st.algorithm.record(st, at_time, costs[i])
        st.added = (st.added or 0) + costs[i]
      elseif reply[4 * i - 3] == 1 then
        -- Nothing is recorded: the hits that would have passed report the state.
        check(i, 0)
      end
    end
  end

  -- A new state a consuming hit named is saved even when nothing was
  -- recorded and the check left it unchanged (a window counter in the
  -- clock's first window): the memory store keeps it, and a window
  -- counter's state moves only forward, so with it a later request after
  -- a clock that stepped back is judged in the same window in both.
  for _, st in pairs(states) do
    if (st.dirty and st.existed) or (st.touched and not st.existed) then
      st.algorithm.save(st, now, margin)
    end
  end

  if mode == 5 then
    if waited > 0 then
      -- What remains now, the reservation counted, as an admission
      -- reports: each state read again as saved (records written by this
      -- call are read from Redis, not from the state in hand).
      local saved = {}
      for i = 1, n do
        local key = bunpack('<d', spec, at + 48 * (i - 1))
        local st = saved[key]
        if not st then
          st = state[i].algorithm.load(base + key, state[i].limit, state[i].window)
          st.algorithm = state[i].algorithm
          saved[key] = st
        end
        local j = 4 * (i - 1)
        local _
        _, _, reply[j + 2], _, reply[j + 4] = st.algorithm.check(st, now, 0)
        reply[j + 1], reply[j + 3] = 1, 0
      end
    end
    reply[4 * n + 1] = waited
    return bpack('<' .. string.rep('d', 4 * n + 1), unpack(reply))
  end

  if mode == 1 and all_allowed then
    local entries = {}
    for index, st in pairs(states) do
      if st.added then
        entries[#entries + 1] = bpack('<dddddd', index, st.code, st.limit, st.window,
          st.algorithm.mark(st, now), st.added)
      end
    end
    if #entries > 0 then
      redis.call('SET', journal, table.concat(entries), 'PX', lifetime)
    end
  end

  return bpack('<' .. string.rep('d', 4 * n), unpack(reply))
end

if mode ~= 4 then
  return decide(ARGV[1], 25, n, mode, 0, #KEYS)
end
