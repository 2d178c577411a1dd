-- slidegate: the numbers this script and its caller agree on, named once
-- for the script (codes.rs names them for the caller; a test checks that
-- both say the same). The other parts write these names; the text sent
-- to Redis has each one replaced by its number (script.rs): as locals
-- they would cost Redis CPU on every call.
--
-- A hit's code: its algorithm, plus its rule's options,
-- algorithm + REPORT * report + LOCKOUT * lockout (µs), so the algorithm
-- is code % REPORT, a report code % LOCKOUT >= REPORT, the lockout
-- math.floor(code / LOCKOUT), and code < REPORT a hit without options.
local SLIDING_LOG, SLIDING_COUNTER, FIXED_WINDOW, GCRA, CONCURRENCY = 0, 1, 2, 3, 4
local REPORT, LOCKOUT = 8, 16
-- (Sizes of two packed doubles are written `2 * 8`, folded by Lua's
-- compiler, so that no code number appears in the script as a literal.)
-- A call's mode rides in its first number, the hit count n:
-- -(mode * MODE_SCALE + n); a plain call sends n alone (see main.lua for
-- the steps of a cross-slot decision and a reservation, batch.lua for a
-- coalesced call).
local MODE_SCALE = 1048576
local PLAIN, RECORD, CHECK, UNDO, COALESCED, RESERVE, WITH_OPTIONS = 0, 1, 2, 3, 4, 5, 6
-- The calls of leases (lease.lua): a budget, places, a settlement.
local LEASE, PLACES, SETTLE = 7, 8, 9
-- What a lease's record says it holds.
local BUDGET_LEASE, PLACES_LEASE = 0, 1
-- A single sliding-log hit's denial, answered as one integer:
-- -(retry * COMPACT + reset), both below COMPACT µs (sliding_log_one.lua).
local COMPACT = 67108864
-- The numbers of one hit in the batch layout, each a double (8 bytes):
-- key index, code, limit, window, cost, checked cost and burst (main.lua).
local HIT_NUMBERS = 7
