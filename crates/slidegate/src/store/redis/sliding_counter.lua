-- slidegate: the sliding window counter (see algorithm/sliding_counter.rs).
--
-- One STRING per (key, rule): start, current and previous counts, as three
-- little-endian doubles, then the byte 254 (this format's mark).
--
-- Built on first use in a call: an EVALSHA runs the whole chunk, and
-- creating the functions of algorithms a call does not use costs Redis CPU.

local function build_sliding_counter()
  local sliding_counter = {}

  function sliding_counter.load(index, limit, window)
    local st = { key = KEYS[index], limit = limit, window = window, start = 0, cur = 0, prev = 0 }
    local value = load_value(index, 24, 'sliding_counter')
    if value then
      st.start, st.cur, st.prev = bunpack('<ddd', value)
      st.existed = true
    end
    return st
  end

  -- Moves to the window holding max(now, start); returns that time.
  local function counter_roll(st, now)
    local W = st.window
    local t = math.max(now, st.start)
    local _, into = divmod(t, W)
    local start = t - into
    if start ~= st.start then
      if start == st.start + W then
        st.prev = st.cur
      else
        st.prev = 0
      end
      st.cur, st.start, st.dirty = 0, start, true
    end
    return t
  end

  -- When the state becomes equivalent to a fresh one (nil: it already is).
  local function counter_deadline(st)
    if st.cur > 0 then
      return st.start + 2 * st.window
    elseif st.prev > 0 then
      return st.start + st.window
    end
    return nil
  end

  -- ceil(previous * (W - e) / W)
  local function counter_weighted(prev, left, W)
    local q, r = muldiv(prev, left, W)
    if r > 0 then
      return q + 1
    end
    return q
  end

  -- The least elapsed time e into a window at which
  -- ceil(previous * (W - e) / W) <= room.
  local function counter_least_elapsed(prev, room, W)
    if prev == 0 or room >= prev then
      return 0
    end
    local q = muldiv(room, W, prev)
    return W - q
  end

  function sliding_counter.check(st, now, cost)
    local L, W = st.limit, st.window
    local t = counter_roll(st, now)
    local usage = st.cur + counter_weighted(st.prev, W - (t - st.start), W)
    local asked = math.max(cost, 1)
    local reset_now = 0
    local deadline = counter_deadline(st)
    if deadline then
      reset_now = until_(deadline, now)
    end
    if usage + asked <= L then
      -- As in fixed_window.lua: nothing passes before a later window.
      if now < st.start and st.cur > 0 then
        return 0, L, L - usage, until_(st.start, now), reset_now
      end
      if cost == 0 then
        return 1, L, L - usage, 0, reset_now
      end
      return 1, L, L - usage - cost, 0, until_(st.start + 2 * W, now)
    end
    local retry_at
    if st.cur + asked <= L then
      retry_at = st.start + counter_least_elapsed(st.prev, L - asked - st.cur, W)
    else
      retry_at = st.start + W + counter_least_elapsed(st.cur, L - asked, W)
    end
    return 0, L, math.max(L - usage, 0), until_(retry_at, now), reset_now
  end

  function sliding_counter.record(st, now, cost)
    counter_roll(st, now)
    st.cur = st.cur + cost
    st.dirty = true
  end

  -- A report: the count stops at 10^12, Rate::MAX_LIMIT (see
  -- algorithm/sliding_counter.rs).
  function sliding_counter.report(st, now, cost)
    counter_roll(st, now)
    st.cur = math.min(st.cur + cost, 1000000000000)
    st.dirty = true
  end

  function sliding_counter.save(st, now, margin)
    local deadline = counter_deadline(st) or now
    local value = bpack('<dddB', st.start, st.cur, st.prev, 254)
    redis.call('SET', st.key, value, 'PX', format('%d', ttl_ms(deadline, now, margin)))
  end
  -- What a cross-slot undo needs: the window the cost was counted in.
  function sliding_counter.mark(st)
    return st.start
  end

  -- Takes back c counted in the window starting at start: from the current
  -- count, or from the previous one once the window has moved on by one
  -- (counts add up, so this is exact); older, it no longer counts.
  function sliding_counter.undo(st, now, margin, start, c)
    if st.start == start then
      st.cur = math.max(st.cur - c, 0)
    elseif st.start == start + st.window then
      st.prev = math.max(st.prev - c, 0)
    else
      return
    end
    sliding_counter.save(st, now, margin)
  end
  -- A lease settled for less: counts add up, so as an undo.
  sliding_counter.give_back = sliding_counter.undo

  return sliding_counter
end

