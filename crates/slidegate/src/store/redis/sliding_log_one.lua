-- slidegate: the sliding log for one hit, the decision nearly every call
-- makes: the steps of sliding_log.lua (which describes the layout and
-- serves batches of hits), on locals, with no table and no closure (a
-- closure over these locals costs more than a redis.call). Deciding takes
-- one GETRANGE (and TIME once per call), admitting one more call
-- (SETRANGE, or SET ... PX when the log starts, is compacted, or moves
-- its expiry with every live record in hand). A denial decided
-- by any record but the oldest live one (costs above 1, or a record given
-- back by a cross-slot undo) falls through to the general code, which
-- decides afresh: nothing has been written by then.
--
-- This file is a block, not a chunk: script.rs places it twice. Inline at
-- the top of the script, for a call of one hit (index 1), where `return`
-- answers the call and falling off the end goes on to the general code;
-- and as the body of `sliding_log_one(index, now, L, W, cost, margin, memo)`
-- for the decisions of a coalesced call (batch.lua), where falling off the
-- end returns nil. The same text either way, so both decide alike; the
-- inline copy spares the common call the closure (about 2,000
-- instructions). `memo` is false inline; in a coalesced call, a table the
-- call's decisions share, for what they would each make again (the text of
-- a number, a log's write format), and the header is unpacked whole. An
-- answer that wrote nothing says so with a second value, true (a call of
-- one hit answers with the first value only): a coalesced call may answer
-- the same question on the same state again without deciding it again.
--
-- The two common answers are integers (cheaper for Redis than a string):
-- r >= 0 is allowed, r remaining, retry 0 and reset W + 1 µs away (decided
-- at now); r < 0 is denied, nothing remaining, -r = retry * COMPACT +
-- reset (both below COMPACT µs, see codes.lua). Any other answer is the
-- usual four doubles.

local key = KEYS[index]
-- The header and up to 64 bytes of records before it: all of a small log.
-- A key of another type (WRONGTYPE, turned into an error naming the key
-- by the store), or a string that is not a log of this format, is
-- refused: never decoded, never overwritten. Checked without a call more
-- than before the checks (this is the call every decision makes).
local raw = redis.call('GETRANGE', key, '-136', '-1')
local size = #raw
local live, H, o1, T1, nt, nT = false, 0, 0, 0, 0, 0
-- The rest of the header: unpacked with the rest in a coalesced call
-- (most of its decisions on a key of their own are admissions, which need
-- it: one unpack instead of two), else only when needed (a denial does not).
local s, e, exp, fmt, ow, tw
if size > 0 then
  local mark
  if size >= 72 then
    if memo then
      mark, H, o1, T1, nt, nT, s, e, exp, fmt, ow, tw = bunpack('<Bddddddddc5BB', raw, size - 71)
    else
      mark, H, o1, T1, nt, nT = bunpack('<Bddddd', raw, size - 71)
    end
  end
  if mark ~= 254 or not (H <= T1 and T1 <= nT and o1 <= nt) then
    return redis.error_reply(format('KEYCONFLICT %d holds a string that is not a sliding log of this version', index))
  end
  live = true
end
local t = now
-- Records count until they expire at now, even with newer ones ahead of
-- it (a clock that stepped back): judged at the newest time, a request
-- admitted now would miss records still inside its own window. Records
-- more than 256^ow - 1 µs older than the newest cannot be decoded, so a
-- clock that stepped back further than that (minutes: see the widths
-- below) drops them.
local d = now
if live and nt > now then
  t = nt
  local width = bunpack('<B', raw, size - 1)
  local floor = nt - 256 ^ width + 1 + W
  if d < floor then
    d = floor
  end
end
-- Drop the records more than a window old (in the header only: the bytes
-- stay until the next compaction). Dropping changes the state even when
-- nothing is recorded: a clock that steps back must not revive them.
local dropped
if live and o1 + W < d then
  dropped = true
  if nt + W < d then
    live = false
  else
    if not s then
      s, e, exp, fmt, ow, tw = bunpack('<dddc5BB', raw, size - 30)
    end
    -- The first live record: the oldest is expired and the newest is
    -- not, so gallop from the oldest (records 1, 2, 4, ... after it) to
    -- the first live one seen, then bisect: O(log k) records read for k
    -- expired ones, whatever was left behind (one record, usually).
    -- Each comes from the bytes in hand or one short GETRANGE; stored
    -- times and totals are truncated, and decoded against the newest
    -- record (see sliding_log.lua).
    local rec, M, MT = ow + tw, 256 ^ ow, 256 ^ tw
    local ntm, nTm, rawstart = nt % M, nT % MT, e - (size - 72)
    local lo, hi, step = 0, (e - s) / rec - 1, 1
    local before, at, total = T1, nt, nT
    while hi - lo > 1 do
      local i
      if step and step < hi then
        i, step = step, step * 2
      else
        step = nil
        i = lo + (hi - lo - (hi - lo) % 2) / 2
      end
      local p, back, less = s + i * rec
      if p >= rawstart then
        back, less = bunpack(fmt, raw, p - rawstart + 1)
      else
        back, less = bunpack(fmt, redis.call('GETRANGE', key, format('%d', p), format('%d', p + rec - 1)))
      end
      back, less = ntm - back, nTm - less
      if back < 0 then
        back = back + M
      end
      if less < 0 then
        less = less + MT
      end
      if nt - back + W < d then
        lo, before = i, nT - less
      else
        hi, at, total, step = i, nt - back, nT - less, nil
      end
    end
    H, o1, T1, s = before, at, total, s + hi * rec
  end
end

local usage, reset_now = 0, 0
if live then
  usage = nT - H
  reset_now = nt + W + 1 - now
end
local need, reply = cost
if need < 1 then
  need = 1
end
if usage + need > L then
  -- Passes once the records up to the first whose running total reaches
  -- nT + need - L have expired: the oldest when every record costs 1.
  if T1 >= nT + need - L then
    local retry = o1 + W + 1 - now
    if usage >= L and reset_now < COMPACT then
      reply = -(retry * COMPACT + reset_now)
    else
      -- Usage may pass L: reservations ahead of now count too.
      reply = bpack('<dddd', 0, math.max(L - usage, 0), retry, reset_now)
    end
  end
elseif cost == 0 then
  reply = bpack('<dddd', 1, L - usage, 0, reset_now)
else
  -- Admitted: record (t, cost); the key must outlive the new record.
  local deadline = t + W + 1
  local value, offset, expire
  if not live then
    -- A new log, written whole: widths such that 256^ow > 2W + 240 s
    -- (records a clock that stepped back by up to a window plus 4 minutes
    -- still counts), and 256^tw > L (2 + 240 s / W): reservations keep
    -- records up to 240 s ahead of now, L units per window of that span
    -- and of the window behind now, and the totals of the records kept
    -- must span less than 256^tw to decode (at most 6 bytes, so that
    -- totals are shifted down before they pass 2^53).
    ow, tw = 1, 1
    while 256 ^ ow <= 2 * W + 240000000 do
      ow = ow + 1
    end
    local units = L * (2 + math.floor(240000000 / W))
    while tw < 6 and 256 ^ tw <= units do
      tw = tw + 1
    end
    fmt = '<I' .. string.sub('1234567', ow, ow) .. 'I' .. string.sub('1234567', tw, tw)
    exp, expire = deadline, true
    value = bpack(fmt .. 'Bddddddddc5BB', t, cost, 254, 0, t, cost, t, cost, 0, ow + tw, exp, fmt, ow, tw)
  else
    if not s then
      s, e, exp, fmt, ow, tw = bunpack('<dddc5BB', raw, size - 30)
    end
    local rec, rawstart = ow + tw, e - (size - 72)
    -- The write's format: the record's, then the header's.
    local full = memo and memo[fmt]
    if not full then
      full = fmt .. 'Bddddddddc5BB'
      if memo then
        memo[fmt] = full
      end
    end
    nT = nT + cost
    if t == nt then
      -- Same µs as the newest record: it takes the cost.
      if s == e - rec then
        T1 = nT
      end
    else
      nt, e = t, e + rec
    end
    if H >= 1099511627776 then
      -- Keep totals far below 2^53: shift them by a multiple of 256^tw,
      -- which leaves every stored total as it is.
      local d = H - H % 256 ^ tw
      H, T1, nT = H - d, T1 - d, nT - d
    end
    local pos, slack = e - rec, (W - W % 2) / 2
    -- The expiry moves only when the key would otherwise expire too
    -- early, and then half a window further: a busy key sets it once per
    -- half window. An admission clamped to the newest record (a caller
    -- whose clock is behind the one that wrote it) sets it too: the TTL
    -- that caller set was measured on a clock ahead of this one.
    if exp < deadline then
      exp, expire = deadline + slack, true
    elseif t > now then
      expire = true
    end
    if (s >= 64 and s > e - s) or (expire and s >= rawstart) then
      -- Rewritten whole, live records only, with one SET ... PX: when as
      -- many bytes are dead as live (O(1) amortized), and whenever the
      -- expiry moves and every live record is in hand (a small log: the
      -- common admission of a key seen a few times a window), where
      -- SETRANGE and PEXPIRE would take two writes.
      local kept = ''
      if pos > s then
        if s >= rawstart then
          kept = string.sub(raw, s - rawstart + 1, pos - rawstart)
        else
          kept = redis.call('GETRANGE', key, format('%d', s), format('%d', pos - 1))
        end
      end
      expire = true
      -- The live records go into the pack as its first value ('c0': a
      -- string of any length), not joined to it with `..`, which would
      -- make one more string of the whole value. Its format is remembered
      -- under the write format it extends.
      local whole = memo and memo[full]
      if not whole then
        whole = 'c0' .. full
        if memo then
          memo[full] = whole
        end
      end
      value = bpack(whole, kept, nt, nT, 254, H, o1, T1, nt, nT, 0, e - s, exp, fmt, ow, tw)
    else
      -- Usually: the newest record and the header, in place.
      offset = pos
      value = bpack(full, nt, nT, 254, H, o1, T1, nt, nT, s, e, exp, fmt, ow, tw)
    end
  end
  local ttl
  if expire then
    local x = exp - now
    ttl = (x - x % 1000) / 1000 + margin
    if x % 1000 > 0 then
      ttl = ttl + 1
    end
    -- Numbers go to Redis as text. In a coalesced call each text is
    -- made once: its decisions share one now, so the TTLs they set
    -- repeat, and so do small logs' offsets.
    local text = memo and memo[ttl]
    if not text then
      text = format('%d', ttl)
      if memo then
        memo[ttl] = text
      end
    end
    ttl = text
  end
  if offset then
    local text = memo and memo[offset]
    if not text then
      text = format('%d', offset)
      if memo then
        memo[offset] = text
      end
    end
    redis.call('SETRANGE', key, text, value)
    if expire then
      redis.call('PEXPIRE', key, ttl)
    end
  else
    redis.call('SET', key, value, 'PX', ttl)
  end
  if t == now then
    return L - usage - cost
  end
  return bpack('<dddd', 1, L - usage - cost, 0, deadline - now)
end
if reply then
  if dropped then
    if not live then
      redis.call('DEL', key)
    else
      redis.call('SETRANGE', key, format('%d', e), bpack('<Bddddddddc5BB', 254, H, o1, T1, nt, nT, s, e, exp, fmt, ow, tw))
    end
  end
  return reply, not dropped
end
