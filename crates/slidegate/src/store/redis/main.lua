-- slidegate: the driver of every call but a single sliding-log hit: one hit
-- of another algorithm, or several hits decided all-or-nothing (several
-- rules of one key, or the descriptors of one request).
--
-- A decision over keys in several Redis Cluster slots is made slot by slot
-- (see cross_slot.rs), with three more modes (codes.lua: a negative hit
-- count -(mode * MODE_SCALE + hits)), each on the batch layout of the spec
-- followed by the journal's lifetime (ms), with the journal's key last in
-- KEYS:
--
--   RECORD: decide and record as usual, unless the journal key exists
--     (the decision was undone before this call ran: nothing is done); when
--     recorded, write the journal: per state, what was added, so that
--     exactly that can be taken back.
--   CHECK: decide without recording anything, as when another part of
--     the batch denies (hits that would pass report their state).
--   UNDO: take back what the journal says was recorded, if it is still
--     there; then leave a tombstone in its place, so the undo is done once
--     however often it is sent and a record call that had not run yet
--     never will; then answer as a check.
--
-- LEASE: a budget lease (see lease.lua), a plain decision in the batch
-- layout followed by the lease's time, its retention (µs) and the most
-- open leases (0: not counted here); KEYS end with the lease's record
-- (and the set of open leases when counted here). Granted, the lease is
-- filed with the mark of each admission.
--
-- WITH_OPTIONS: a plain decision in the batch layout followed by one
-- unused number (what a hit that reports takes even alone),
-- and RESERVE, on one slot, with the batch layout followed by the longest
-- wait (µs) in place of the journal's lifetime, and no journal key:
--
--   RESERVE: when the hits do not all fit now, find the earliest time
--     they do (now plus the longest retry_after of a check at now: usage
--     only falls as time passes while nothing is admitted) and, if that is
--     within the longest wait, record every hit at that time (see
--     store/memory/reserve.rs). The reply is that of a batch followed by
--     one more number: the wait (µs), or -1 when nothing was recorded.

-- The builders by algorithm code (codes.lua): SLIDING_LOG's, then those of
-- SLIDING_COUNTER, FIXED_WINDOW, GCRA and CONCURRENCY, listed in the order
-- of their codes rather than keyed by them, so that they sit in the
-- table's array part (cheaper to build and to read).
-- What a budget lease's decision calls (LEASE), set by lease.lua for a
-- call of a lease only: no closure is made for the others.
local lease_open, lease_file

local BUILDERS = { [SLIDING_LOG] = build_sliding_log, build_sliding_counter, build_fixed_window, build_gcra,
  build_concurrency }
local built = {}

local function build(algorithm_code)
  local algorithm = built[algorithm_code]
  if not algorithm then
    algorithm = BUILDERS[algorithm_code]()
    built[algorithm_code] = algorithm
  end
  return algorithm
end

local mode = PLAIN
if n < 0 then
  mode = math.floor(-n / MODE_SCALE)
  n = -n % MODE_SCALE
end

-- One hit of another algorithm than the inline sliding log, or with a
-- lockout, on KEYS[index]: its code is the algorithm's plus LOCKOUT * the
-- lockout (µs), see codes.lua; a hit that reports comes in the batch
-- layout (WITH_OPTIONS), even alone. The lockout's steps are decide()'s for one
-- hit, without its tables. A plain call of one such hit, and each such
-- hit of a coalesced call (batch.lua), is decided here.
-- A lockout lives beside its state, in the state's key with ':block'
-- appended (the same hash tag, so the same slot): the time it ends,
-- expiring then; 0 when there is none.
local function read_block(key)
  return tonumber(redis.call('GET', key .. ':block')) or 0
end

local function write_block(key, blocked)
  redis.call('SET', key .. ':block', format('%d', blocked), 'PX',
    format('%d', ttl_ms(blocked, now, margin)))
end

-- An answer (allowed, remaining, retry, reset) under a lockout that runs
-- until `blocked`: denied until it ends (or later, if the algorithm says
-- so), nothing remaining; unchanged once it has ended.
local function under_lockout(blocked, allowed, remaining, retry, reset)
  if blocked <= now then
    return allowed, remaining, retry, reset
  end
  local rest = blocked - now
  if allowed == 1 or retry < rest then
    retry = rest
  end
  return 0, 0, retry, math.max(reset, rest)
end

local function decide_one(index, code, limit, window, c)
  local block = math.floor(code / LOCKOUT)
  local algorithm = build(code % REPORT)
  local st = algorithm.load(index, limit, window)
  local allowed, _, remaining, retry, reset = algorithm.check(st, now, c)
  local blocked = 0
  if block > 0 then
    blocked = read_block(st.key)
    if blocked <= now and allowed == 0 and c > 0 then
      blocked = now + block
      write_block(st.key, blocked)
    end
  end
  if blocked > now then
    allowed, remaining, retry, reset = under_lockout(blocked, allowed, remaining, retry, reset)
  elseif allowed == 1 and c > 0 then
    algorithm.record(st, now, c)
    st.kept = true
  end
  if st.dirty and (st.existed or st.kept) then
    algorithm.save(st, now, margin)
  end
  return bpack('<dddd', allowed, remaining, retry, reset)
end

if mode == PLAIN and n == 1 then
  return decide_one(1, code, L, W, cost)
end

-- One decision over the hits of `spec` from byte `at` (n hits of seven
-- numbers, then the journal's lifetime for a step), with mode `mode`; its
-- keys are KEYS[base + 1 .. base + nkeys], the journal's last. Key indices
-- in the spec and in the journal are relative to base, so a journal
-- written by one call is read right by another that places the decision
-- elsewhere in KEYS (a coalesced call, see batch.lua).
local function decide(spec, at, n, mode, base, nkeys)
  -- Per hit, in parallel arrays (tables cost Redis CPU): its state, cost
  -- and checked cost. States are loaded once per key.
  local journal, lifetime, max_wait, lease
  if mode == WITH_OPTIONS then
    mode = PLAIN
  end
  if mode == RESERVE then
    max_wait = bunpack('<d', spec, at + 8 * HIT_NUMBERS * n)
  elseif mode == LEASE then
    -- A budget lease (see lease.lua): decided as a plain decision, then
    -- filed, refused beyond the open leases the store allows.
    lease = lease_open(bunpack('<ddd', spec, at + 8 * HIT_NUMBERS * n))
    if lease.refusal then
      return lease.refusal
    end
    mode = PLAIN
  elseif mode > PLAIN then
    journal = KEYS[base + nkeys]
    lifetime = format('%d', bunpack('<d', spec, at + 8 * HIT_NUMBERS * n))
  end
  if mode == RECORD and redis.call('EXISTS', journal) == 1 then
    return redis.error_reply('CANCELLED this decision was undone before it ran')
  end
  -- An undo answers as a check and nothing more: what the decision it
  -- undoes reported, or the lockouts it started, stay as they are.
  local undone = false
  if mode == UNDO then
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
    mode, undone = CHECK, true
  end

  -- Options ride in a hit's code (see codes.lua); a lockout is kept beside
  -- the state (write_block).
  local state, costs, askeds, states, reports, blocks = {}, {}, {}, {}, {}, {}
  local optioned = false
  for i = 1, n do
    local key, code, limit, window, c, a, burst = bunpack('<ddddddd', spec, at + 8 * HIT_NUMBERS * (i - 1))
    local algorithm_code = code % REPORT
    local st = states[key]
    if not st then
      local algorithm = build(algorithm_code)
      st = algorithm.load(base + key, limit, window, burst)
      -- The most that may pass at once (a GCRA bucket's size, else the limit).
      st.most = burst
      st.algorithm, st.code = algorithm, algorithm_code
      states[key] = st
    end
    state[i], costs[i], askeds[i] = st, c, a
    reports[i], blocks[i] = code % LOCKOUT >= REPORT, math.floor(code / LOCKOUT)
    if code >= REPORT then
      optioned = true
    end
    if blocks[i] > 0 and not st.blocked then
      st.blocked = read_block(st.key)
    end
  end

  -- The reply: four numbers per hit (allowed, remaining, retry_after,
  -- reset_after), filled in place.
  local reply, all_allowed = {}, mode ~= CHECK
  local function check(i, c)
    local st = state[i]
    local j = 4 * (i - 1)
    local _
    reply[j + 1], _, reply[j + 2], reply[j + 3], reply[j + 4] = st.algorithm.check(st, now, c)
  end
  -- A hit under a lockout that runs now is denied until it ends (or
  -- later, if its rule says so), nothing remaining.
  local function under_block(i)
    local st, j = state[i], 4 * (i - 1)
    if blocks[i] > 0 then
      reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4] =
        under_lockout(st.blocked, reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4])
    end
  end
  for i = 1, n do
    local a, st, j = askeds[i], state[i], 4 * (i - 1)
    -- A report may ask more than the limit (the burst): it never fits.
    check(i, math.min(a, st.most))
    if a > st.most then
      reply[j + 1] = 0
    end
    under_block(i)
    if reply[j + 1] == 0 then
      all_allowed = false
    end
  end

  -- A reservation: the time every hit fits, if within the longest wait.
  local at_time, waited = now, -1
  if mode == RESERVE then
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

  -- A denial starts the lockout of every rule that denied its own
  -- consuming hit, unless one runs (denials never extend a block); the
  -- usage of reporting hits is recorded whatever the answer.
  local denied = {}
  if optioned and not all_allowed and not undone then
    for i = 1, n do
      local st = state[i]
      denied[i] = reply[4 * i - 3] == 0
      if blocks[i] > 0 and costs[i] > 0 and denied[i] and st.blocked <= now then
        st.blocked, st.block_dirty = now + blocks[i], true
      end
    end
    for i = 1, n do
      if reports[i] and costs[i] > 0 then
        local st = state[i]
        st.algorithm.report(st, now, costs[i])
        st.kept = true
      end
    end
  end

  for i = 1, n do
    if costs[i] > 0 then
      if all_allowed then
        local st = state[i]
        st.algorithm.record(st, at_time, costs[i])
        st.kept = true
        -- Reported usage is never taken back by a cross-slot undo.
        if not reports[i] then
          st.added = (st.added or 0) + costs[i]
        end
      elseif reply[4 * i - 3] == 1 then
        -- Nothing is recorded: the hits that would have passed report the state.
        check(i, 0)
      elseif denied[i] and reports[i] then
        -- Still denied, with the state the report left.
        check(i, 0)
        reply[4 * i - 3] = 0
      end
    end
  end
  if optioned and not all_allowed then
    -- The lockouts this denial started too.
    for i = 1, n do
      under_block(i)
    end
  end

  -- A state is written if it was there, or if this decision recorded in
  -- it: a refusal leaves no new state behind (as in the memory store).
  for _, st in pairs(states) do
    if st.dirty and (st.existed or st.kept) then
      st.algorithm.save(st, now, margin)
    end
    if st.block_dirty then
      write_block(st.key, st.blocked)
    end
  end

  if mode == RESERVE then
    if waited > 0 then
      -- What remains now, the reservation counted, as an admission
      -- reports: each state read again as saved (records written by this
      -- call are read from Redis, not from the state in hand).
      local saved = {}
      for i = 1, n do
        local key = bunpack('<d', spec, at + 8 * HIT_NUMBERS * (i - 1))
        local st = saved[key]
        if not st then
          st = state[i].algorithm.load(base + key, state[i].limit, state[i].window, state[i].most)
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

  if lease and all_allowed then
    lease_file(lease, n, function(i)
      local st = state[i]
      return st.code, st.limit, st.window, st.algorithm.mark(st, now)
    end, costs[1])
  end

  if mode == RECORD and all_allowed then
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

if mode ~= COALESCED and mode < LEASE then
  return decide(ARGV[1], 25, n, mode, 0, #KEYS)
end
