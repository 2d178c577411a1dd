-- slidegate: a coalesced call, the decisions of several callers that were
-- waiting while earlier calls to the same Redis were out (see coalesce.rs),
-- decided one after the other, each exactly as a call of its own would
-- decide it, and all of them atomically (one script call).
--
-- ARGV[1]: now, margin and -(COALESCED * MODE_SCALE + d) for d decisions
-- (the prelude's first three numbers), then per decision: its hit count as
-- a call of its own would send it (n, or -(mode * MODE_SCALE + n) in
-- another mode than PLAIN), the number of its keys, then the rest of its
-- own call's ARGV[1] (for one hit: code, limit, window, cost; for several:
-- seven numbers per hit, and one more number in another mode than PLAIN: a
-- step's journal lifetime, a reservation's longest wait). KEYS: each decision's keys in turn,
-- its journal last for a step; key indices in a decision's numbers count
-- from its first key.
--
-- Reply: one element per decision, what a call of its own would have
-- answered: an integer, a string of doubles, or an error (a key conflict of
-- one decision, or a cancelled cross-slot step, is that decision's alone:
-- each decision runs under pcall, and every refusal happens before the
-- decision writes anything).
--
-- `TIME` is read once, by the prelude: every decision of the call is
-- decided at the same microsecond.

-- Answers that wrote nothing, by Redis key: the cost asked and the answer.
-- A decision on the same key with the same cost, while nothing has
-- written to that key since, gets the same answer without deciding again:
-- the key names its rule (limit, window, algorithm), every decision of the
-- call has the same now, and a decision is a function of these and of the
-- key's state alone. A hot key's denials cost a table lookup each, not a
-- GETRANGE. Any decision that may write to a key forgets its answers.
local unchanged = {}
-- What the call's sliding-log hits make more than once, made once (see
-- sliding_log_one.lua): the text of a number, a log's write format.
local memo = {}

local spec, replies, at, base = ARGV[1], {}, 25, 0
for d = 1, n do
  -- For one hit, all of its numbers; for several, the first four unused.
  local hits, nkeys, code, limit, window, c = bunpack('<dddddd', spec, at)
  local ok, reply, wrote_nothing = true, nil, false
  if hits == 1 then
    at = at + 48
    local key = KEYS[base + 1]
    local seen = unchanged[key]
    -- A hit with a lockout reads its block too: never answered from memory.
    if seen and seen[1] == c and code < REPORT then
      reply = seen[2]
    else
      -- Only a key that holds an answer is cleared: in Lua 5.1 storing
      -- nil under a key the table lacks inserts that key (and grows the
      -- table), which a call over 80 keys of their own paid per decision.
      if seen then
        unchanged[key] = nil
      end
      -- A sliding-log hit the inline steps leave undecided (nil) is
      -- decided by the general code, as a call of its own would be.
      if code == SLIDING_LOG then
        ok, reply, wrote_nothing = pcall(sliding_log_one, base + 1, now, limit, window, c, margin, memo)
      end
      if ok and reply == nil then
        ok, reply, wrote_nothing = pcall(decide_one, base + 1, code, limit, window, c)
      end
      if ok and wrote_nothing then
        unchanged[key] = { c, reply }
      end
    end
  else
    at = at + 2 * 8
    local its_mode = PLAIN
    if hits < 0 then
      its_mode = math.floor(-hits / MODE_SCALE)
      hits = -hits % MODE_SCALE
    end
    for k = base + 1, base + nkeys do
      unchanged[KEYS[k]] = nil
    end
    ok, reply = pcall(decide, spec, at, hits, its_mode, base, nkeys)
    at = at + 8 * HIT_NUMBERS * hits
    if its_mode > PLAIN then
      at = at + 8
    end
  end
  if not ok and type(reply) ~= 'table' then
    reply = { err = tostring(reply) }
  end
  replies[d] = reply
  base = base + nkeys
end
return replies
