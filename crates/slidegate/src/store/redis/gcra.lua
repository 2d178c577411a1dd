-- slidegate: GCRA (see algorithm/gcra.rs).
--
-- One STRING per (key, rule): q and r as two little-endian doubles (then
-- the byte 254, this format's mark), the
-- theoretical arrival time scaled by the limit L kept as tat_scaled =
-- q * L + r (q whole µs, 0 <= r < L), so the emission interval W / L is
-- applied exactly, with no scaled value (which would reach 10^27) ever held
-- in one number.
--
-- Built on first use in a call: an EVALSHA runs the whole chunk, and
-- creating the functions of algorithms a call does not use costs Redis CPU.

local function build_gcra()
  local gcra = {}

  -- `burst`: the bucket's size (Rule::with_burst), the limit when not given.
  function gcra.load(index, limit, window, burst)
    local st = { key = KEYS[index], limit = limit, window = window, burst = burst or limit, q = 0, r = 0 }
    local value = load_value(index, 2 * 8, 'gcra')
    if value then
      st.q, st.r = bunpack('<dd', value)
      st.existed = true
    end
    return st
  end

  -- max(TAT, now) as (q, r).
  local function gcra_base(st, now)
    if st.q > now or (st.q == now and st.r > 0) then
      return st.q, st.r
    end
    return now, 0
  end

  -- (q, r) + units * W, in units of 1/L µs.
  local function gcra_add(q, r, units, L, W)
    local dq, dr = muldiv(units, W, L)
    q, r = q + dq, r + dr
    if r >= L then
      q, r = q + 1, r - L
    end
    return q, r
  end

  -- Units that would pass in a row at `now` from the scaled TAT (q, r) >= now
  -- in a bucket of B * W / L µs, (cq, cr) as muldiv(B, W, L) gives it:
  -- floor((B * W - ((q - now) * L + r)) / W), or 0 when negative. With
  -- m = cq - (q - now) and m * L = whole * W + rest, that is whole +
  -- floor((rest + cr - r) / W).
  local function gcra_room(q, r, now, L, W, cq, cr)
    local m = cq - (q - now)
    if m < 0 then
      return 0
    end
    local whole, rest = muldiv(m, L, W)
    local extra = rest + cr - r
    if extra < 0 then
      return math.max(whole - ceil_div(-extra, W), 0)
    end
    -- extra < W + L, below 2^53.
    local k = divmod(extra, W)
    return whole + k
  end

  local function gcra_ceil(q, r)
    if r > 0 then
      return q + 1
    end
    return q
  end

  function gcra.check(st, now, cost)
    local L, W = st.limit, st.window
    -- The bucket, B * W / L µs, as (cq, cr) in units of 1/L µs: W when B = L.
    local cq, cr = W, 0
    if st.burst ~= L then
      cq, cr = muldiv(st.burst, W, L)
    end
    local bq, br = gcra_base(st, now)
    local asked = math.max(cost, 1)
    local aq, ar = gcra_add(bq, br, asked, L, W)
    local reset_now = 0
    if st.q > now or (st.q == now and st.r > 0) then
      reset_now = until_(gcra_ceil(st.q, st.r), now)
    end
    if aq - now < cq or (aq - now == cq and ar <= cr) then
      if cost == 0 then
        return 1, L, gcra_room(bq, br, now, L, W, cq, cr), 0, reset_now
      end
      return 1, L, gcra_room(aq, ar, now, L, W, cq, cr), 0, until_(gcra_ceil(aq, ar), now)
    end
    -- Passes once now has caught up to after - B * W / L.
    local rq, rr = aq - cq, ar - cr
    if rr < 0 then
      rq, rr = rq - 1, rr + L
    end
    return 0, L, gcra_room(bq, br, now, L, W, cq, cr), until_(gcra_ceil(rq, rr), now), reset_now
  end

  function gcra.record(st, now, cost)
    local bq, br = gcra_base(st, now)
    st.q, st.r = gcra_add(bq, br, cost, st.limit, st.window)
    st.dirty = true
  end

  -- A report: the TAT moves as for an admission, but at most ten years
  -- (REPORT_HORIZON µs) past the window (see algorithm/gcra.rs).
  function gcra.report(st, now, cost)
    gcra.record(st, now, cost)
    local horizon = now + st.window + 315360000000000
    if st.q > horizon or (st.q == horizon and st.r > 0) then
      st.q, st.r = horizon, 0
    end
  end

  function gcra.save(st, now, margin)
    local ttl = ttl_ms(gcra_ceil(st.q, st.r), now, margin)
    redis.call('SET', st.key, bpack('<ddB', st.q, st.r, 254), 'PX', format('%d', ttl))
  end
  -- What a cross-slot undo needs: when the cost was admitted.
  function gcra.mark(_, now)
    return now
  end

  -- Takes back what is left of c units admitted at t: their emission
  -- intervals c * W / L, less the time since t, and nothing once that much
  -- time has passed. Why this never lets more through than if they had
  -- never been admitted: see cross_slot.rs. A lease settled for less
  -- (give_back) admitted `kept` units more with them, which drain first:
  -- what is left is min(c, c + kept - (now - t)) intervals' worth (see
  -- algorithm/gcra.rs).
  function gcra.undo(st, now, margin, t, c, kept)
    local L, W = st.limit, st.window
    local cq, cr = muldiv(c, W, L)
    local aq, ar = cq, cr
    if kept and kept > 0 then
      aq, ar = muldiv(c + kept, W, L)
    end
    local elapsed = now - t
    if elapsed < 0 then
      elapsed = 0
    end
    if aq < elapsed or (aq == elapsed and ar == 0) then
      return
    end
    -- Back by what is left of all the intervals, at most the returned ones.
    local bq, br = aq - elapsed, ar
    if bq > cq or (bq == cq and br > cr) then
      bq, br = cq, cr
    end
    local q, r = st.q - bq, st.r - br
    if r < 0 then
      q, r = q - 1, r + L
    end
    st.q, st.r = q, r
    gcra.save(st, now, margin)
  end
  gcra.give_back = gcra.undo

  return gcra
end

