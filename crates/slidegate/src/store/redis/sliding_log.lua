-- slidegate: the exact sliding log (see algorithm/sliding_log.rs).
--
-- One LIST per (key, rule), appended in time order and trimmed from the front:
--
--   [base, H, t1 - base, T1, t2 - base, T2, ..., tn - base, Tn]
--
-- H is the running total just before the first entry, t_i an admission time
-- (µs, stored relative to base so it packs into a small listpack integer) and
-- T_i the running total up to and including entry i. Usage is Tn - H; the
-- entry that decides retry_after is the first with T_i >= target. Dropping
-- the entries before k is one LTRIM that keeps entry k-1's pair, whose total
-- is the new H, and one LSET that puts base back in front of it. Admissions
-- in the same µs merge into the last pair.
--
-- Redis CPU goes mostly into each command and each element it returns, so
-- a call reads the header, the first and the last entry (two LRANGEs), and
-- any other entry only when a decision needs it.
--
-- Built on first use in a call: an EVALSHA runs the whole chunk, and
-- creating the functions of algorithms a call does not use costs Redis CPU.

local function build_sliding_log()
  local sliding_log = {}

  local REBASE_TOTAL = 1099511627776 -- 2^40
  local REBASE_OFFSET = 2147483648 -- 2^31 µs (~36 min)

  function sliding_log.load(key, limit, window)
    local st = { key = key, limit = limit, window = window, ct = {}, cT = {} }
    local head = redis.call('LRANGE', key, 0, 3)
    if #head < 4 then
      return st
    end
    st.exists, st.existed = true, true
    st.base, st.H = tonumber(head[1]), tonumber(head[2])
    st.ct[1], st.cT[1] = st.base + tonumber(head[3]), tonumber(head[4])
    local tail = redis.call('LRANGE', key, -2, -1)
    st.nt, st.nT = st.base + tonumber(tail[1]), tonumber(tail[2])
    return st
  end

  -- Reads entries from .. to (fewer past the end) into the cache; returns
  -- how many it read.
  local function log_read(st, from, to)
    local raw = redis.call('LRANGE', st.key, 2 * from, 2 * to + 1)
    local count = #raw / 2
    for j = 1, count do
      st.ct[from + j - 1] = st.base + tonumber(raw[2 * j - 1])
      st.cT[from + j - 1] = tonumber(raw[2 * j])
    end
    return count
  end

  -- Running total of entry i, or nil past the end.
  local function log_total(st, i)
    if st.cT[i] == nil then
      log_read(st, i, i)
    end
    return st.cT[i]
  end

  -- Time of entry i (which exists).
  local function log_time(st, i)
    if st.ct[i] == nil then
      log_read(st, i, i)
    end
    return st.ct[i]
  end

  -- Drops the entries more than a window older than t. The first live
  -- entry is found by galloping from the front: every expired entry is read
  -- about once before it is deleted.
  local function log_drop_expired(st, t)
    local W = st.window
    if not st.exists or st.ct[1] + W >= t then
      return
    end
    if st.nt + W < t then
      redis.call('DEL', st.key)
      st.exists, st.ct, st.cT = false, {}, {}
      return
    end
    local k, from, step = nil, 2, 1
    while not k do
      if st.ct[from] == nil then
        log_read(st, from, from + step - 1)
      end
      for i = from, from + step - 1 do
        local at = st.ct[i]
        if at == nil then
          error('slidegate: sliding log ' .. st.key .. ' ends before its newest entry')
        end
        if at + W >= t then
          k = i
          break
        end
      end
      from, step = from + step, step * 2
    end
    local before = st.cT[k - 1]
    redis.call('LTRIM', st.key, 2 * (k - 1), -1)
    redis.call('LSET', st.key, 0, int(st.base))
    st.H = before
    local ct, cT = {}, {}
    for i, at in pairs(st.ct) do
      if i >= k then
        ct[i - k + 1], cT[i - k + 1] = at, st.cT[i]
      end
    end
    st.ct, st.cT = ct, cT
  end

  -- The first entry whose running total reaches target (entry n does).
  -- Entries cost at least 1, so it is at most target - H places in, and
  -- exactly there when every entry costs 1: usually one read, or none.
  local function log_deciding(st, target)
    if st.cT[1] >= target then
      return 1
    end
    local hi = target - st.H
    if st.cT[hi] == nil and log_read(st, hi - 1, hi) < 2 then
      hi = (redis.call('LLEN', st.key) - 2) / 2
      st.ct[hi], st.cT[hi] = st.nt, st.nT
    end
    local lo = 2
    if log_total(st, hi - 1) < target then
      return hi
    end
    hi = hi - 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if log_total(st, mid) >= target then
        hi = mid
      else
        lo = mid + 1
      end
    end
    return lo
  end

  -- Rewrites the list with H = 0 and base = the oldest time, so totals and
  -- offsets stay small integers (and below 2^53) on a key that never empties.
  -- O(n), and only after totals grew by 2^40 or time moved by 2^31 µs.
  local function log_rebase(st)
    local raw = redis.call('LRANGE', st.key, 2, -1)
    local H, old_base, base = st.H, st.base, st.ct[1]
    redis.call('DEL', st.key)
    local chunk = { int(base), 0 }
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
    st.ct, st.cT = { base }, { tonumber(raw[2]) - H }
  end

  function sliding_log.check(st, now, cost)
    local L, W = st.limit, st.window
    local t = now
    if st.exists and st.nt > now then
      t = st.nt
    end
    log_drop_expired(st, t)
    local usage = 0
    local reset_now = 0
    if st.exists then
      usage = st.nT - st.H
      reset_now = until_(st.nt + W + 1, now)
    end
    local asked = math.max(cost, 1)
    if usage + asked <= L then
      if cost == 0 then
        return 1, L, L - usage, 0, reset_now
      end
      return 1, L, L - usage - cost, 0, until_(t + W + 1, now)
    end
    local k = log_deciding(st, st.nT + asked - L)
    return 0, L, math.max(L - usage, 0), until_(log_time(st, k) + W + 1, now), reset_now
  end

  function sliding_log.record(st, now, cost)
    st.dirty = true
    if not st.exists then
      redis.call('RPUSH', st.key, int(now), 0, 0, int(cost))
      st.exists, st.base, st.H, st.nt, st.nT = true, now, 0, now, cost
      st.ct, st.cT = { now }, { cost }
      return
    end
    if now <= st.nt then
      st.nT = st.nT + cost
      redis.call('LSET', st.key, -1, int(st.nT))
      if st.ct[1] == st.nt then
        st.cT[1] = st.nT
      end
      return
    end
    if st.H >= REBASE_TOTAL or st.ct[1] - st.base >= REBASE_OFFSET then
      log_rebase(st)
    end
    st.nT = st.nT + cost
    redis.call('RPUSH', st.key, int(now - st.base), int(st.nT))
    st.nt = now
  end

  -- Trimming wrote at once; after an admission the key lives until idle.
  function sliding_log.save(st, now, margin)
    redis.call('PEXPIRE', st.key, ttl_ms(st.nt + st.window + 1, now, margin))
  end

  return sliding_log
end

