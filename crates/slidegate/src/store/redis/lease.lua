-- slidegate: leases (see store/lease.rs): a budget or places taken before
-- the work, settled after. Three modes (codes.lua), each a call of its own
-- on the slot of the lease's key; nothing here runs for other calls.
--
-- A lease's record is one STRING (KEYS after the states): the byte 1
-- while open (0 once settled), then little-endian doubles: its expiry
-- (µs), its cost, what it holds (BUDGET_LEASE or PLACES_LEASE) and its
-- number of rules, per rule its code, limit, window and mark (what names
-- its admission: see each algorithm's mark), then the caller's key. It
-- is kept for its retention after its expiry, so that a late settlement
-- is told it expired. When this call counts the open leases (a store
-- with one Redis; a cluster counts them in a call of their own), their
-- set is the last key: ids scored by expiry, those past it dropped first.
--
--   LEASE: a budget, decided as a plain decision (see main.lua), filed
--     when granted. TOOMANYLEASES when the open leases are at their most.
--   PLACES: one place under each concurrency rule (KEYS: their states),
--     all or none; ARGV[1] after the prelude's numbers: per rule its limit
--     and window, then the lease's time and retention, the most open
--     leases (0: not counted here), the waiter's deadline (0: not a
--     waiter) and whether to queue it when denied (1/0). ARGV[2]: the
--     lease's id; ARGV[3]: the caller's key; ARGV[4]: the waiter's ticket.
--     Reply: four numbers per rule, as a decision's.
--   SETTLE: a commit or a release; ARGV[1]: per rule its code, limit,
--     window and mark, then the cost used (-1: a release), the cost
--     reserved, and whether the open leases are counted here (1/0).
--     ARGV[2]: the lease's id; ARGV[3]: the change feed's channel;
--     ARGV[4]: the caller's key. LEASENOTFOUND when the record is gone,
--     LEASEEXPIRED when it is settled or past its expiry. A budget gives
--     back what was not used (each algorithm's give_back), or records
--     what was used beyond it as a report; places are freed, and waiters
--     told on the change feed. Reply: over the limit (1/0), then four
--     numbers per rule: its state, as a probe sees it.

if mode >= LEASE then
  -- Keeps `key` until at least `deadline` (µs), never shortening its life.
  local function keep_until(key, deadline)
    local ttl = ttl_ms(deadline, now, margin)
    if redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, format('%d', ttl))
    end
  end

  -- The set of open leases when this call counts them (its key last):
  -- those past their expiry dropped; an error reply beyond `most`.
  local function count_open(most)
    if most <= 0 then
      return nil
    end
    local open = KEYS[#KEYS]
    redis.call('ZREMRANGEBYSCORE', open, '-inf', format('%d', now))
    if redis.call('ZCARD', open) >= most then
      return open, redis.error_reply(format('TOOMANYLEASES %d', most))
    end
    return open
  end

  -- Files a granted lease (see the layout above), counted among the open
  -- leases when `open`; `part(i)` answers rule i's code, limit, window
  -- and mark.
  local function file(record, open, expires, retain, cost, kind, count, part)
    local parts = {}
    for i = 1, count do
      parts[i] = bpack('<dddd', part(i))
    end
    redis.call('SET', record, bpack('<Bdddd', 1, expires, cost, kind, count) .. table.concat(parts)
      .. ARGV[3], 'PX', format('%d', ttl_ms(expires + retain, now, margin)))
    if open then
      redis.call('ZADD', open, format('%d', expires), ARGV[2])
      keep_until(open, expires)
    end
  end

  if mode == LEASE then
    lease_open = function(time, retain, most)
      local open, refusal = count_open(most)
      local record = KEYS[#KEYS]
      if open then
        record = KEYS[#KEYS - 1]
      end
      return { open = open, refusal = refusal, time = time, retain = retain, record = record }
    end
    lease_file = function(lease, count, part, cost)
      file(lease.record, lease.open, now + lease.time, lease.retain, cost, BUDGET_LEASE, count, part)
    end
    return decide(ARGV[1], 25, n, LEASE, 0, #KEYS)
  end

  local spec = ARGV[1]
  local concurrency = build(CONCURRENCY)

  if mode == PLACES then
    local time, retain, most, deadline, enqueue = bunpack('<ddddd', spec, 25 + 2 * 8 * n)
    local open, refusal = count_open(most)
    if refusal then
      return refusal
    end
    local member
    if deadline > 0 then
      member = ARGV[4] .. ':' .. format('%d', deadline)
    end
    local states, reply, granted = {}, {}, true
    for i = 1, n do
      local st = concurrency.load(i, bunpack('<dd', spec, 25 + 2 * 8 * (i - 1)))
      states[i] = st
      local j = 4 * (i - 1)
      local _
      reply[j + 1], _, reply[j + 2], reply[j + 3], reply[j + 4] = concurrency.check(st, now, 1, member)
      if reply[j + 1] == 0 then
        granted = false
      end
    end
    local expires = now + time
    if granted then
      for i = 1, n do
        local st = states[i]
        redis.call('ZADD', st.key, format('%d', expires), ARGV[2])
        keep_until(st.key, expires)
        if st.rank then
          redis.call('ZREM', st.queue, member)
        end
        if reply[4 * i] < time then
          reply[4 * i] = time
        end
      end
      file(KEYS[n + 1], open, expires, retain, 1, PLACES_LEASE, n, function(i)
        return CONCURRENCY, states[i].limit, states[i].window, expires
      end)
    elseif member and enqueue == 1 then
      for i = 1, n do
        local st = states[i]
        if not st.rank then
          redis.call('ZADD', st.queue, format('%d', now), member)
          keep_until(st.queue, deadline)
        end
      end
    end
    return bpack('<' .. string.rep('d', 4 * n), unpack(reply))
  end

  -- SETTLE
  local used, reserved, counted = bunpack('<ddd', spec, 25 + 32 * n)
  local record = KEYS[n + 1]
  local head = redis.call('GETRANGE', record, '0', '8')
  if #head < 9 then
    return redis.error_reply('LEASENOTFOUND no lease has this id')
  end
  local open, expires = bunpack('<Bd', head)
  if open ~= 1 or now >= expires then
    return redis.error_reply('LEASEEXPIRED the lease is no longer open')
  end
  redis.call('SETRANGE', record, '0', '\0')
  if counted == 1 then
    redis.call('ZREM', KEYS[n + 2], ARGV[2])
  end
  local parts = {}
  for i = 1, n do
    parts[i] = { bunpack('<dddd', spec, 25 + 32 * (i - 1)) }
  end
  local over = 0
  if parts[1][1] == CONCURRENCY then
    local waiting = false
    for i = 1, n do
      redis.call('ZREM', KEYS[i], ARGV[2])
      if redis.call('EXISTS', KEYS[i] .. ':q') == 1 then
        waiting = true
      end
    end
    if waiting then
      redis.call('PUBLISH', ARGV[3], 'key ' .. ARGV[4])
    end
  else
    local kept = math.max(used, 0)
    if kept < reserved then
      for i = 1, n do
        local code, limit, window, mark = unpack(parts[i])
        local algorithm = build(code)
        local st = algorithm.load(i, limit, window)
        if st.existed then
          algorithm.give_back(st, now, margin, mark, reserved - kept, kept)
        end
      end
    elseif kept > reserved then
      -- Used beyond the reservation: taken as a report takes it.
      local hits = {}
      for i = 1, n do
        local code, limit, window = unpack(parts[i])
        -- A hit as main.lua reads it (HIT_NUMBERS), the bucket the limit:
        -- leases of a rule with a burst are refused on Redis (leases.rs).
        hits[i] = bpack('<ddddddd', i, code + REPORT, limit, window, kept - reserved, kept - reserved, limit)
      end
      local answer = decide(table.concat(hits), 1, n, PLAIN, 0, n)
      for i = 1, n do
        if bunpack('<d', answer, 32 * (i - 1) + 1) == 0 then
          over = 1
        end
      end
    end
  end
  -- The state each rule is left in, as a probe sees it.
  local reply = { over }
  for i = 1, n do
    local code, limit, window = unpack(parts[i])
    local algorithm = build(code)
    local st = algorithm.load(i, limit, window)
    local j = 1 + 4 * (i - 1)
    local _
    reply[j + 1], _, reply[j + 2], reply[j + 3], reply[j + 4] = algorithm.check(st, now, 0)
  end
  return bpack('<' .. string.rep('d', 1 + 4 * n), unpack(reply))
end
