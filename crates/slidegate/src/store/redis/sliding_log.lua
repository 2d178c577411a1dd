-- slidegate: the exact sliding log (see algorithm/sliding_log.rs), for
-- batches; one hit alone takes the same steps in sliding_log_one.lua.
--
-- One STRING per (key, rule): fixed-size records, then a 72-byte header.
--
--   record: time (ow bytes) and running total (tw bytes), unsigned
--           little-endian, each modulo its width's range: 256^ow > W and
--           256^tw > L, chosen when the log starts (6 bytes at 100/1s:
--           new logs take 256^ow > 2W + 240 s and, for reservations,
--           256^tw > L (2 + 240 s / W), see below).
--   header: the byte 254 (this format's mark), H, o1, T1, nt, nT, s, e,
--           exp (little-endian doubles), the record format "<IowItw" (5
--           chars), ow, tw (1 byte each). A value without the mark or with
--           an inconsistent header (another application's, a manual SET)
--           is refused with an error naming the key, never decoded or
--           overwritten. Older formats never meet this one anyway: the key
--           names carry the format's version (see keys.rs).
--
-- H is the running total just before the first live record, o1 and T1 that
-- record's time and total, nt and nT the newest record's; usage is nT - H.
-- Times strictly increase from record to record. Totals never decrease: a
-- record costs at least 1, except one given back by a cross-slot undo
-- (which subtracts its cost from it and every later total), which may cost
-- 0 until it expires.
-- Records at bytes [s, e) are the log (the header starts at e); those
-- before s were dropped and stay until a compaction rewrites the live ones
-- (when as many bytes are dead as live). exp is the time (µs, the decision
-- clock) until which the key's TTL keeps it.
--
-- Why a record decodes from its truncated bytes: every record kept lies in
-- [nt - 256^ow + 1, nt] (each decision drops what is more than W older
-- than its time, and never judges at a time earlier than
-- nt - 256^ow + 1 + W, so a clock that stepped back by more than the
-- slack, minutes for new logs, drops records it would otherwise count;
-- an admission then becomes the newest) with a total in (nT - L, nT]
-- (in (nT - L (2 + 240 s / W), nT] with reservations up to 240 s ahead of
-- now), and both ranges are narrower than 256^ow and 256^tw. So time = nt - ((nt - t) mod 256^ow),
-- and likewise for totals: nothing is ever rebased, and the absolute
-- values in the header stay below 2^53 (totals are shifted down by a
-- multiple of 256^tw once H passes 2^40).
--
-- A call reads the header and up to 64 bytes of records before it (all of
-- a small log) with one GETRANGE, and reads further records only to drop
-- expired ones or find the deciding one, each search O(log n) records
-- (so a decision's Redis time is bounded however many expired records a
-- long idle left behind). An admission writes the newest
-- record and the header with one SETRANGE, or the whole value with one
-- SET ... PX when the log starts, is compacted, or must move its expiry
-- while all its live records are in hand (a small log: two commands a
-- decision, never GETRANGE, SETRANGE and PEXPIRE).
--
-- Built on first use in a batch.

local function build_sliding_log()
  local sliding_log = {}

  -- The state of KEYS[index]; a value that is not a log of this format is
  -- refused with an error naming the key (see prelude.lua).
  function sliding_log.load(index, limit, window)
    local key = KEYS[index]
    local st = { key = key, limit = limit, window = window, live = false }
    local raw = redis.pcall('GETRANGE', key, '-136', '-1')
    if type(raw) == 'table' then
      refused(index, raw)
    end
    local size = #raw
    if size == 0 then
      return st
    end
    local mark
    if size >= 72 then
      mark, st.H, st.o1, st.T1, st.nt, st.nT, st.s, st.e, st.exp, st.fmt, st.ow, st.tw =
        bunpack('<Bddddddddc5BB', raw, size - 71)
    end
    if mark ~= 254 then
      conflict(index, 'holds a string that is not a sliding log of this version')
    end
    local ow, tw, s, e = st.ow, st.tw, st.s, st.e
    local rec = ow + tw
    if not (ow >= 1 and ow <= 7 and tw >= 1 and tw <= 7
        and st.fmt == '<I' .. string.sub('1234567', ow, ow) .. 'I' .. string.sub('1234567', tw, tw)
        and st.H <= st.T1 and st.T1 <= st.nT and st.o1 <= st.nt
        and s >= 0 and s < e and s % rec == 0 and e % rec == 0
        and (e + 72 == size or (size == 136 and e >= 64))) then
      conflict(index, 'holds a sliding log with an inconsistent header')
    end
    st.live, st.existed = true, true
    st.raw, st.rawstart = raw, e - (size - 72)
    st.M, st.MT = 256 ^ ow, 256 ^ tw
    -- Records decode against the newest record as loaded: a record made
    -- by this call (a report before a later check) moves nt and nT.
    st.lnt, st.lnT, st.shift = st.nt, st.nT, 0
    st.ntm, st.nTm = st.nt % st.M, st.nT % st.MT
    return st
  end

  -- Time and running total of the record at byte p (s <= p < e) of the log
  -- as loaded: from the bytes in hand, or read with up to `span` after it.
  local function record_at(st, p, span)
    local off, total
    if p >= st.rawstart then
      off, total = bunpack(st.fmt, st.raw, p - st.rawstart + 1)
    else
      if not st.chunk or p < st.cfrom or p >= st.cto then
        local to = p + span * (st.ow + st.tw)
        if to > st.e then
          to = st.e
        end
        st.chunk = redis.call('GETRANGE', st.key, format('%d', p), format('%d', to - 1))
        st.cfrom, st.cto = p, to
      end
      off, total = bunpack(st.fmt, st.chunk, p - st.cfrom + 1)
    end
    local back, less = st.ntm - off, st.nTm - total
    if back < 0 then
      back = back + st.M
    end
    if less < 0 then
      less = less + st.MT
    end
    return st.lnt - back, st.lnT - less - st.shift
  end

  -- Drops the records more than a window older than t: the first live
  -- one is found by galloping from the oldest, then bisecting (as in
  -- sliding_log_one.lua), O(log k) records read for k expired ones.
  local function drop_expired(st, t)
    local W = st.window
    if not st.live or st.o1 + W >= t then
      return
    end
    -- Dropping changes the state even when nothing is recorded: a clock
    -- that steps back must not revive them.
    st.dirty = true
    if st.nt + W < t then
      st.live = false
      return
    end
    local rec = st.ow + st.tw
    local lo, hi, step = 0, (st.e - st.s) / rec - 1, 1
    local before, at, total = st.T1, st.nt, st.nT
    while hi - lo > 1 do
      local i
      if step and step < hi then
        i, step = step, step * 2
      else
        step = nil
        i = lo + math.floor((hi - lo) / 2)
      end
      local a, b = record_at(st, st.s + i * rec, 1)
      if a + W < t then
        lo, before = i, b
      else
        hi, at, total, step = i, a, b, nil
      end
    end
    st.H, st.o1, st.T1, st.s = before, at, total, st.s + hi * rec
  end

  -- Time of the first record whose running total reaches target (the
  -- newest does). Records cost at least 1, so it is at most target - H
  -- records in, and exactly there when every record costs 1: that record
  -- is read first; records given back by an undo (cost 0) may put it
  -- further, and a bisection finds it either way.
  local function deciding(st, target)
    if st.T1 >= target then
      return st.o1
    end
    local rec = st.ow + st.tw
    local first, last = st.s + rec, st.e - rec
    local guess = st.s + (target - st.H - 1) * rec
    if guess > last then
      guess = last
    end
    local lo, hi = first, last
    local at, total = record_at(st, guess, 2)
    if total >= target then
      local _, before = record_at(st, guess - rec, 2)
      if before < target then
        return at
      end
      hi = guess - rec
    else
      lo = guess + rec
    end
    while lo < hi do
      local mid = lo + math.floor((hi - lo) / rec / 2) * rec
      local _, t = record_at(st, mid, 1)
      if t >= target then
        hi = mid
      else
        lo = mid + rec
      end
    end
    return (record_at(st, lo, 1))
  end

  function sliding_log.check(st, now, cost)
    local L, W = st.limit, st.window
    local t = now
    -- Records count until they expire at now, even with newer ones ahead
    -- of it; those too old to decode are dropped (see sliding_log_one.lua).
    local d = now
    if st.live and st.nt > now then
      t = st.nt
      d = math.max(now, st.nt - st.M + 1 + W)
    end
    drop_expired(st, d)
    local usage, reset_now = 0, 0
    if st.live then
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
    local at = deciding(st, st.nT + asked - L)
    return 0, L, math.max(L - usage, 0), until_(at + W + 1, now), reset_now
  end

  -- In memory only: save writes. All records of one call share its time,
  -- so they make at most one new record (the first appends, the rest merge).
  function sliding_log.record(st, now, cost)
    st.dirty, st.recorded = true, true
    if not st.live then
      local ow, tw = 1, 1
      while 256 ^ ow <= 2 * st.window + 240000000 do
        ow = ow + 1
      end
      -- 256^tw > L (2 + 240 s / W), at most 6 bytes: see sliding_log_one.lua.
      local units = st.limit * (2 + math.floor(240000000 / st.window))
      while tw < 6 and 256 ^ tw <= units do
        tw = tw + 1
      end
      st.fmt = '<I' .. string.sub('1234567', ow, ow) .. 'I' .. string.sub('1234567', tw, tw)
      st.ow, st.tw, st.fresh, st.live = ow, tw, true, true
      st.H, st.o1, st.T1, st.nt, st.nT, st.s, st.e = 0, now, cost, now, cost, 0, ow + tw
      return
    end
    local t = now
    if st.nt > now then
      t = st.nt
    end
    local rec = st.ow + st.tw
    st.nT = st.nT + cost
    if t == st.nt then
      if st.s == st.e - rec then
        st.T1 = st.nT
      end
    else
      st.nt, st.e = t, st.e + rec
    end
    if st.H >= 1099511627776 then
      local d = st.H - st.H % 256 ^ st.tw
      st.H, st.T1, st.nT, st.shift = st.H - d, st.T1 - d, st.nT - d, (st.shift or 0) + d
    end
  end

  -- Records a report of `cost` whatever the usage, keeping only the
  -- newest L units (see algorithm/sliding_log.rs): the units that would
  -- pass the limit are dropped from the oldest records first, before the
  -- record is made, so every record kept still decodes (its total within
  -- L of the newest). Runs after a check at the same time.
  function sliding_log.report(st, now, cost)
    local L = st.limit
    local c = math.min(cost, L)
    -- Recorded at the newest record's time when that is ahead of now,
    -- even if every record is dropped below.
    local t = now
    if st.live and st.nt > now then
      t = st.nt
    end
    if st.live then
      local H = st.nT + c - L
      if H >= st.nT then
        st.live, st.dirty = false, true
      elseif H > st.H then
        -- The newest record holds more than H; it may have been made by
        -- this call (not yet in Redis), so it is never read: the search
        -- reads only the records before it.
        local rec = st.ow + st.tw
        local last = (st.e - st.s) / rec - 1
        local lo, hi = 0, last
        while lo < hi do
          local mid = lo + math.floor((hi - lo) / 2)
          local _, total = record_at(st, st.s + mid * rec, 1)
          if total > H then
            hi = mid
          else
            lo = mid + 1
          end
        end
        local at, total = st.nt, st.nT
        if lo < last then
          at, total = record_at(st, st.s + lo * rec, 1)
        end
        st.H, st.o1, st.T1, st.s, st.dirty = H, at, total, st.s + lo * rec, true
      end
    end
    sliding_log.record(st, t, c)
  end

  function sliding_log.save(st, now, margin)
    if not st.recorded then
      -- Records were dropped, none added.
      if not st.live then
        redis.call('DEL', st.key)
      else
        redis.call('SETRANGE', st.key, format('%d', st.e), bpack('<Bddddddddc5BB', 254, st.H, st.o1,
          st.T1, st.nt, st.nT, st.s, st.e, st.exp, st.fmt, st.ow, st.tw))
      end
      return
    end
    local W, rec = st.window, st.ow + st.tw
    local deadline, slack = st.nt + W + 1, (W - W % 2) / 2
    local pos = st.e - rec
    if st.fresh then
      st.exp = deadline
      redis.call('SET', st.key, bpack(st.fmt .. 'Bddddddddc5BB', st.nt, st.nT, 254, st.H, st.o1,
        st.T1, st.nt, st.nT, 0, rec, st.exp, st.fmt, st.ow, st.tw), 'PX',
        format('%d', ttl_ms(st.exp, now, margin)))
      return
    end
    -- As in sliding_log_one.lua: the expiry moves when the key would
    -- otherwise expire too early, or for a record clamped to the newest
    -- (st.nt ahead of this caller's now).
    local expire = st.exp < deadline or st.nt > now
    if st.exp < deadline then
      st.exp = deadline + slack
    end
    if (st.s >= 64 and st.s > st.e - st.s) or (expire and st.s >= st.rawstart) then
      -- Rewritten whole, live records only, with one SET ... PX: when as
      -- many bytes are dead as live, or when the expiry moves and every
      -- live record is in hand (one write instead of SETRANGE and PEXPIRE).
      local kept = ''
      if pos > st.s then
        if st.s >= st.rawstart then
          kept = string.sub(st.raw, st.s - st.rawstart + 1, pos - st.rawstart)
        else
          kept = redis.call('GETRANGE', st.key, format('%d', st.s), format('%d', pos - 1))
        end
      end
      redis.call('SET', st.key, kept .. bpack(st.fmt .. 'Bddddddddc5BB', st.nt, st.nT, 254, st.H,
        st.o1, st.T1, st.nt, st.nT, 0, st.e - st.s, st.exp, st.fmt, st.ow, st.tw), 'PX',
        format('%d', ttl_ms(st.exp, now, margin)))
      return
    end
    redis.call('SETRANGE', st.key, format('%d', pos), bpack(st.fmt .. 'Bddddddddc5BB', st.nt, st.nT,
      254, st.H, st.o1, st.T1, st.nt, st.nT, st.s, st.e, st.exp, st.fmt, st.ow, st.tw))
    if expire then
      redis.call('PEXPIRE', st.key, format('%d', ttl_ms(st.exp, now, margin)))
    end
  end

  -- What a cross-slot undo needs to find this call's record: its time.
  function sliding_log.mark(st)
    return st.nt
  end

  -- The record made at time t, if it is still in the log: its offset, the
  -- record size, and the cost it holds alone (its running total less the
  -- one before it). nil when a reset or its expiry removed it.
  local function record_of(st, t)
    if not st.live or t > st.nt or t < st.o1 then
      return nil
    end
    local rec = st.ow + st.tw
    local lo, hi = 0, (st.e - st.s) / rec - 1
    while lo < hi do
      local mid = lo + math.floor((hi - lo) / 2)
      if (record_at(st, st.s + mid * rec, 1)) < t then
        lo = mid + 1
      else
        hi = mid
      end
    end
    local p = st.s + lo * rec
    local at, total = record_at(st, p, 1)
    if at ~= t then
      return nil
    end
    local before = st.H
    if p > st.s then
      local _
      _, before = record_at(st, p - rec, 1)
    end
    return p, rec, total - before
  end

  -- Takes back c of the record made at time t, if it is still in the log
  -- (a reset or its expiry may have removed it): that record and every
  -- later one hold their running total c lower, so usage drops by c as if
  -- it had never been admitted, and no other admission changes. A record
  -- that held only this cost stays, costing 0, until it expires.
  function sliding_log.undo(st, _, _, t, c)
    local p, rec, held = record_of(st, t)
    if not p then
      return
    end
    if held < c then
      return
    end
    local tail
    if p >= st.rawstart then
      tail = string.sub(st.raw, p - st.rawstart + 1, st.e - st.rawstart)
    else
      tail = redis.call('GETRANGE', st.key, format('%d', p), format('%d', st.e - 1))
    end
    local records = {}
    for from = 1, #tail, rec do
      local offset, stored = bunpack(st.fmt, tail, from)
      records[#records + 1] = bpack(st.fmt, offset, (stored - c) % st.MT)
    end
    st.nT = st.nT - c
    if p == st.s then
      st.T1 = st.T1 - c
    end
    redis.call('SETRANGE', st.key, format('%d', p), table.concat(records) .. bpack('<Bddddddddc5BB',
      254, st.H, st.o1, st.T1, st.nt, st.nT, st.s, st.e, st.exp, st.fmt, st.ow, st.tw))
  end

  -- A lease settled for less gives back c of the record made at time t
  -- (see store/lease.rs), as undo does, except that a record left costing
  -- nothing leaves the log: the log ends where the memory store's does
  -- (which drops such an entry), and every record costs at least 1. The
  -- records after it move back one place; the value is written whole
  -- (the bytes before the record copied by Redis), its expiry kept.
  function sliding_log.give_back(st, _, _, t, c)
    local p, rec, held = record_of(st, t)
    if not p then
      return
    end
    if held < c then
      return
    end
    if held == c and st.s == st.e - rec then
      -- Its one record gone, the log holds nothing.
      redis.call('DEL', st.key)
      return
    end
    local tail
    if p >= st.rawstart then
      tail = string.sub(st.raw, p - st.rawstart + 1, st.e - st.rawstart)
    else
      tail = redis.call('GETRANGE', st.key, format('%d', p), format('%d', st.e - 1))
    end
    local records, from = {}, 1
    if held == c then
      from = 1 + rec
      if p == st.e - rec then
        st.nt = (record_at(st, p - rec, 1))
      end
      if p == st.s then
        local next_at, next_total = record_at(st, p + rec, 1)
        st.o1, st.T1 = next_at, next_total - c
      end
      st.e = st.e - rec
    elseif p == st.s then
      st.T1 = st.T1 - c
    end
    for i = from, #tail, rec do
      local offset, stored = bunpack(st.fmt, tail, i)
      records[#records + 1] = bpack(st.fmt, offset, (stored - c) % st.MT)
    end
    st.nT = st.nT - c
    local head = ''
    if p > 0 then
      head = redis.call('GETRANGE', st.key, '0', format('%d', p - 1))
    end
    local ttl = redis.call('PTTL', st.key)
    local value = head .. table.concat(records) .. bpack('<Bddddddddc5BB', 254, st.H, st.o1, st.T1,
      st.nt, st.nT, st.s, st.e, st.exp, st.fmt, st.ow, st.tw)
    if ttl > 0 then
      redis.call('SET', st.key, value, 'PX', format('%d', ttl))
    else
      redis.call('SET', st.key, value)
    end
  end

  return sliding_log
end
