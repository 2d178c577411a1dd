-- slidegate: the exact sliding log (see algorithm/sliding_log.rs).
--
-- One LIST per (key, rule), appended in time order and trimmed from the front:
--
--   [H, base, t1 - base, T1, t2 - base, T2, ..., tn - base, Tn]
--
-- H is the running total just before the first entry, t_i an admission time
-- (µs, stored relative to base so it packs into a small listpack integer) and
-- T_i the running total up to and including entry i. Usage is Tn - H; the
-- entry that decides retry_after is the first with T_i >= target, found by
-- binary search. Admissions in the same µs merge into the last pair.

local sliding_log = {}

local LOG_FRONT = 8 -- entries read together with the header, in one LRANGE
local LOG_REBASE_TOTAL = 1099511627776 -- 2^40
local LOG_REBASE_OFFSET = 2147483648 -- 2^31 µs (~36 min)

local function log_empty(st)
  st.n, st.H, st.base, st.nt, st.nT = 0, 0, 0, 0, 0
  st.ft, st.fT, st.nf = {}, {}, 0
end

-- Reads up to LOG_FRONT entries from entry `first` on into the front cache,
-- which then holds entries first .. first + nf - 1 renumbered from 1.
local function log_read_front(st, first)
  local raw = redis.call('LRANGE', st.key, 2 * first, 2 * (first + LOG_FRONT) - 1)
  st.ft, st.fT = {}, {}
  st.nf = #raw / 2
  for i = 1, st.nf do
    st.ft[i] = st.base + tonumber(raw[2 * i - 1])
    st.fT[i] = tonumber(raw[2 * i])
  end
end

function sliding_log.load(key, limit, window)
  local st = { key = key, limit = limit, window = window }
  log_empty(st)
  local head = redis.call('LRANGE', key, 0, 1 + 2 * LOG_FRONT)
  if #head == 0 then
    return st
  end
  st.existed = true
  st.H, st.base = tonumber(head[1]), tonumber(head[2])
  st.nf = (#head - 2) / 2
  for i = 1, st.nf do
    st.ft[i] = st.base + tonumber(head[2 * i + 1])
    st.fT[i] = tonumber(head[2 * i + 2])
  end
  if st.nf < LOG_FRONT then
    st.n = st.nf
  else
    st.n = (redis.call('LLEN', key) - 2) / 2
  end
  if st.n == st.nf then
    st.nt, st.nT = st.ft[st.nf], st.fT[st.nf]
  else
    local tail = redis.call('LRANGE', key, -2, -1)
    st.nt, st.nT = st.base + tonumber(tail[1]), tonumber(tail[2])
  end
  return st
end

-- Time and running total of entry i (1-based).
local function log_entry(st, i)
  if i <= st.nf then
    return st.ft[i], st.fT[i]
  end
  if i == st.n then
    return st.nt, st.nT
  end
  local pair = redis.call('LRANGE', st.key, 2 * i, 2 * i + 1)
  return st.base + tonumber(pair[1]), tonumber(pair[2])
end

-- The first i in [lo, hi] with holds(t_i, T_i), for a predicate that stays
-- true once true and holds at hi. The cached front is scanned first (the
-- answer is nearly always there); then the entry just before hi, which is
-- the answer when every entry costs 1; then a binary search.
local function log_search(st, lo, hi, holds)
  local cached = math.min(hi, st.nf)
  for i = lo, cached do
    if holds(log_entry(st, i)) then
      return i
    end
  end
  lo = math.max(lo, cached + 1)
  if lo >= hi then
    return hi
  end
  if not holds(log_entry(st, hi - 1)) then
    return hi
  end
  hi = hi - 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if holds(log_entry(st, mid)) then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

-- Drops the entries more than a window older than t.
local function log_drop_expired(st, t)
  local W = st.window
  if st.n == 0 or st.ft[1] + W >= t then
    return
  end
  if st.nt + W < t then
    redis.call('DEL', st.key)
    log_empty(st)
    return
  end
  local k = log_search(st, 2, st.n, function(at)
    return at + W >= t
  end)
  local _, before = log_entry(st, k - 1)
  -- Keep entry k-1's pair as the new header's place, then overwrite it.
  redis.call('LTRIM', st.key, 2 * (k - 1), -1)
  redis.call('LSET', st.key, 0, int(before))
  redis.call('LSET', st.key, 1, int(st.base))
  st.H = before
  st.n = st.n - (k - 1)
  if k - 1 < st.nf then
    local ft, fT = {}, {}
    for i = k, st.nf do
      ft[i - k + 1], fT[i - k + 1] = st.ft[i], st.fT[i]
    end
    st.ft, st.fT, st.nf = ft, fT, st.nf - (k - 1)
  else
    log_read_front(st, 1)
  end
end

-- Rewrites the list with H = 0 and base = the oldest time, so totals and
-- offsets stay small integers (and below 2^53) on a key that never empties.
-- O(n), and only after totals grew by 2^40 or time moved by 2^31 µs.
local function log_rebase(st)
  local raw = redis.call('LRANGE', st.key, 2, -1)
  local H, old_base, base = st.H, st.base, st.ft[1]
  redis.call('DEL', st.key)
  local chunk = { 0, int(base) }
  for i = 1, #raw, 2 do
    chunk[#chunk + 1] = int(old_base + tonumber(raw[i]) - base)
    chunk[#chunk + 1] = int(tonumber(raw[i + 1]) - H)
    if #chunk >= 1000 then
      redis.call('RPUSH', st.key, unpack(chunk))
      chunk = {}
    end
  end
  if #chunk > 0 then
    redis.call('RPUSH', st.key, unpack(chunk))
  end
  st.H, st.base, st.nT = 0, base, st.nT - H
  for i = 1, st.nf do
    st.fT[i] = st.fT[i] - H
  end
end

function sliding_log.check(st, now, cost)
  local L, W = st.limit, st.window
  local t = now
  if st.n > 0 and st.nt > now then
    t = st.nt
  end
  log_drop_expired(st, t)
  local usage = 0
  local reset_now = 0
  if st.n > 0 then
    usage = st.nT - st.H
    reset_now = until_(st.nt + W + 1, now)
  end
  local asked = math.max(cost, 1)
  if usage + asked <= L then
    if cost == 0 then
      return { 1, L, L - usage, 0, reset_now }
    end
    return { 1, L, L - usage - cost, 0, until_(t + W + 1, now) }
  end
  -- The request passes once every entry up to the first whose running
  -- total reaches `target` has expired. Entries cost at least 1, so that
  -- entry is at most `target - H` places in: the exact place when all cost 1.
  local target = st.nT + asked - L
  local k = log_search(st, 1, math.min(target - st.H, st.n), function(_, total)
    return total >= target
  end)
  local at = log_entry(st, k)
  return { 0, L, math.max(L - usage, 0), until_(at + W + 1, now), reset_now }
end

function sliding_log.record(st, now, cost)
  st.dirty = true
  if st.n == 0 then
    redis.call('RPUSH', st.key, 0, int(now), 0, int(cost))
    st.H, st.base, st.n, st.nt, st.nT = 0, now, 1, now, cost
    st.ft, st.fT, st.nf = { now }, { cost }, 1
    return
  end
  if now <= st.nt then
    st.nT = st.nT + cost
    redis.call('LSET', st.key, -1, int(st.nT))
    if st.n <= st.nf then
      st.fT[st.n] = st.nT
    end
    return
  end
  if st.H >= LOG_REBASE_TOTAL or st.ft[1] - st.base >= LOG_REBASE_OFFSET then
    log_rebase(st)
  end
  st.nT = st.nT + cost
  redis.call('RPUSH', st.key, int(now - st.base), int(st.nT))
  st.n, st.nt = st.n + 1, now
  if st.nf == st.n - 1 and st.nf < LOG_FRONT then
    st.nf = st.n
    st.ft[st.n], st.fT[st.n] = now, st.nT
  end
end

-- Trimming wrote at once; after an admission the key lives until idle.
function sliding_log.save(st, now, margin)
  redis.call('PEXPIRE', st.key, ttl_ms(st.nt + st.window + 1, now, margin))
end

