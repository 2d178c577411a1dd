-- slidegate: the concurrency limit (see algorithm/concurrency.rs).
--
-- Places held: a ZSET per (key, rule), one member per lease (its id),
-- scored by the time (µs) its place is given back: held while now < score.
-- Waiters: a ZSET beside it (the state's key with ':q'), one member per
-- waiting request ('<ticket>:<deadline>'), scored by its arrival (µs):
-- served in that order, so the places ahead of a waiter are its rank. A
-- waiter past its deadline is dropped once it reaches the head of the
-- queue (a waiter that gives up leaves at once). Both keys expire once
-- nothing is held or waits (see lease.lua, which writes them).
--
-- Built on first use in a call.

local function build_concurrency()
  local concurrency = {}

  function concurrency.load(index, limit, window)
    local key = KEYS[index]
    return { key = key, queue = key .. ':q', index = index, limit = limit, window = window }
  end

  -- Drops the places whose time ran out and the waiters past their
  -- deadline at the head of the queue; counts what is held and waits.
  -- A key of another type is refused (see arith.lua).
  local function tidy(st, now)
    local dropped = redis.pcall('ZREMRANGEBYSCORE', st.key, '-inf', format('%d', now))
    if type(dropped) == 'table' then
      refused(st.index, dropped)
    end
    while true do
      local head = redis.pcall('ZRANGE', st.queue, 0, 0)
      if type(head) == 'table' and head.err then
        refused(st.index, head)
      end
      if #head == 0 then
        break
      end
      local deadline = tonumber(string.match(head[1], ':(%d+)$')) or 0
      if deadline > now then
        break
      end
      redis.call('ZREM', st.queue, head[1])
    end
    st.held = redis.call('ZCARD', st.key)
    st.queued = redis.call('ZCARD', st.queue)
  end

  -- The score of the n-th place to be given back (1 the first).
  local function nth_expiry(st, n)
    local found = redis.call('ZRANGE', st.key, n - 1, n - 1, 'WITHSCORES')
    return tonumber(found[2])
  end

  -- What a request of `cost` places gets at now: as the waiter `member`
  -- of the queue, the places of the waiters before it count (st.rank:
  -- its rank, nil when not queued); otherwise, or when not queued yet,
  -- every waiter's.
  function concurrency.check(st, now, cost, member)
    tidy(st, now)
    local L = st.limit
    local ahead = st.queued
    if member then
      st.rank = redis.call('ZRANK', st.queue, member)
      if st.rank then
        ahead = st.rank
      end
    end
    local taken = st.held + ahead
    local reset = 0
    if st.held > 0 then
      reset = until_(nth_expiry(st, st.held), now)
    end
    local asked = math.max(cost, 1)
    if taken + asked <= L then
      return 1, L, L - taken - cost, 0, reset
    end
    -- Passes at the earliest once enough places are given back by their
    -- time (a release frees them sooner).
    local need = math.min(taken + asked - L, st.held)
    local retry = 0
    if need > 0 then
      retry = until_(nth_expiry(st, need), now)
    end
    return 0, L, math.max(L - taken, 0), retry, reset
  end

  -- Places are taken by leases only (a cost above 0 outside a lease is
  -- refused before the script): a plain decision only probes.
  function concurrency.record() end
  function concurrency.report() end
  function concurrency.save() end

  return concurrency
end
