-- prelude: starts every script that makes decisions or settles them;
-- meter.lua and the algorithms' files follow it, then decide.lua and one.lua (one decision)
-- or batch.lua (several), or settle.lua (a reservation's settlement).
--
-- A decision is one or more limits, decided all or nothing; their keys
-- share one hash tag (one slot).
-- KEYS    the state of each limit of the decision, in order.
-- ARGV    now in microseconds, or "" to read the Redis clock (TIME), so
--         one key always sees one clock; rid, the id of the reservation
--         (or prefetch) the decision makes, a decimal below 2^52, or ""
--         for none; more, the events a prefetch asks for beyond the cost
--         (0 for none, see decide.lua); then per limit, in the order of
--         its keys: its cost (events asked for, 0 <= cost <= burst; 0 only
--         reports the state), the name of its algorithm, then that
--         algorithm's own arguments.
-- Reply   see decide.lua and settle.lua.
--
-- Each algorithm file adds algorithms.<name> = {args = N, decide = f},
-- then, after its "--- settle ---" line, algorithms.<name>.settle = s
-- (only settlement and batch scripts have it). f(key, cost, at, commit) reads its N arguments from
-- ARGV[at] on and returns allowed (0|1), remaining, retry_after,
-- reset_after, delay, next and, optionally, mark and epoch: next is the
-- time until one more event fits (0 when remaining is the burst); mark and
-- epoch are what the algorithm's settle needs to know of the state the
-- decision left (meter.lua; 0 when absent). Durations are in
-- microseconds, all integers (floor or ceil after every division, so that
-- state stored in Redis stays exact). It reads the time from `now`. It
-- stores the new state only if it allows and commit is true, which the
-- caller passes only for a cost above 0. s(key, delta, at, reset, mark,
-- epoch, debt) settles a reservation made at `reserved`, whose decision
-- said reset, mark and epoch of the limit: a delta below 0 gives back
-- -delta events as far as the limit still holds them; above 0 it charges
-- delta more without denying (a debt: the state stays in debt at most
-- `debt` µs longer than the limit's full allowance takes to come back).
-- A file may also have a fast path for its algorithm, a block `if name ==
-- '<name>' then ... end` between a line "--- fast ---" and a line "---
-- general ---", which lua.go puts in decide.lua's quick: with key, cost
-- (>= 0; sent: as sent), at (its first argument) and now set, it returns
-- what f would answer, as allowed, remaining, reset_after, next and
-- retry_after, having stored what f stores; or nothing, before it writes,
-- for a state or a store it leaves to f. The part of a file before its
-- "--- general ---" line runs first, before the rest of any file.
local now -- the decision's clock in microseconds: decide and settle set it
local redis_now -- the Redis clock, read at most once per script

-- clock returns the time an ARGV value gives, or the Redis clock for "".
local function clock(arg)
  if arg ~= '' then return arg + 0 end
  if not redis_now then
    local time = redis.call('TIME')
    redis_now = time[1] * 1000000 + time[2]
  end
  return redis_now
end
--- general ---
local rid -- the reservation's (or prefetch's) id, or "": names its slots and log entries
local rid_n = 0 -- rid as a number, 0 for none: a meter's epoch (meter.lua)
local fetching = 0 -- the events a decision prefetches beyond its cost (decide.lua)
local giveback = false -- settle: a prefetch's give-back (meter.lua)
-- prefetch_lease: µs a meter keeps prefetched events counted at least
-- (gcra.lua; prefetchLease in internal/engine/prefetch.go)
local prefetch_lease = 20000
local reserved, reserved_n -- settle: when the reservation was made, and its n
local max_units = 2251799813685248 -- 2^51: the most units a meter's backlog or position reaches

-- expire sets key's time to live to us microseconds, in whole milliseconds,
-- at least one; or deletes it when there is nothing to keep.
local function expire(key, us)
  if us <= 0 then redis.call('DEL', key) return end
  redis.call('PEXPIRE', key, math.max(1, math.ceil(us / 1000)))
end

local algorithms = {}
