-- slidegate: the fixed window (see algorithm/fixed_window.rs).
--
-- One STRING per (key, rule): start and count, as two little-endian
-- doubles, then the byte 254 (this format's mark).
--
-- Built on first use in a call: an EVALSHA runs the whole chunk, and
-- creating the functions of algorithms a call does not use costs Redis CPU.

local function build_fixed_window()
  local fixed_window = {}

  function fixed_window.load(index, limit, window)
    local st = { key = KEYS[index], limit = limit, window = window, start = 0, count = 0 }
    local value = load_value(index, 2 * 8, 'fixed_window')
    if value then
      st.start, st.count = bunpack('<dd', value)
      st.existed = true
    end
    return st
  end

  local function window_roll(st, now)
    local t = math.max(now, st.start)
    local _, into = divmod(t, st.window)
    if t - into ~= st.start then
      st.start, st.count, st.dirty = t - into, 0, true
    end
  end

  function fixed_window.check(st, now, cost)
    local L, W = st.limit, st.window
    window_roll(st, now)
    local left = until_(st.start + W, now)
    local reset_now = 0
    if st.count > 0 then
      reset_now = left
    end
    local asked = math.max(cost, 1)
    if st.count + asked <= L then
      -- The state belongs to a later window that counts admissions (a
      -- clock that stepped back): nothing passes before it begins (see
      -- algorithm/fixed_window.rs).
      if now < st.start and st.count > 0 then
        return 0, L, L - st.count, until_(st.start, now), reset_now
      end
      if cost == 0 then
        return 1, L, L - st.count, 0, reset_now
      end
      return 1, L, L - st.count - cost, 0, left
    end
    return 0, L, math.max(L - st.count, 0), left, reset_now
  end

  function fixed_window.record(st, now, cost)
    window_roll(st, now)
    st.count = st.count + cost
    st.dirty = true
  end

  -- A report: the count stops at the limit (see algorithm/fixed_window.rs).
  function fixed_window.report(st, now, cost)
    window_roll(st, now)
    st.count = math.min(st.count + cost, st.limit)
    st.dirty = true
  end

  function fixed_window.save(st, now, margin)
    local deadline = now
    if st.count > 0 then
      deadline = st.start + st.window
    end
    local value = bpack('<ddB', st.start, st.count, 254)
    redis.call('SET', st.key, value, 'PX', format('%d', ttl_ms(deadline, now, margin)))
  end
  -- What a cross-slot undo needs: the window the cost was counted in.
  function fixed_window.mark(st)
    return st.start
  end

  -- Takes back c counted in the window starting at start, if that window
  -- is still the one kept: counts add up, so this is exact.
  function fixed_window.undo(st, now, margin, start, c)
    if st.start ~= start then
      return
    end
    st.count = math.max(st.count - c, 0)
    fixed_window.save(st, now, margin)
  end
  -- A lease settled for less: counts add up, so as an undo.
  fixed_window.give_back = fixed_window.undo

  return fixed_window
end

