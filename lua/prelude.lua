-- prelude: starts every script that makes decisions or settles them;
-- meter.lua and the algorithms' files follow it, then decide.lua and one.lua (one decision)
-- or batch.lua (several), or settle.lua (a reservation's settlement).
--
-- A decision is one or more limits, decided all or nothing; their keys
-- share one hash tag (one slot).
-- KEYS    the state of each limit of the decision, in order.
-- ARGV    now in microseconds, or "" to read the Redis clock (TIME), so
--         one key always sees one clock; the id of the reservation the
--         decision makes ("" for none: only concurrency limits and the
--         sliding log read it; "+M" for a prefetch, see decide.lua);
--         then per limit, in the order of its keys: its cost (events asked
--         for, 0 <= cost <= burst; 0 only reports the state), the name of
--         its algorithm, then that algorithm's own arguments.
-- Reply   see decide.lua and settle.lua.
--
-- Each algorithm file adds algorithms.<name> = {args = N, decide = f},
-- then, after its "--- settle ---" line, algorithms.<name>.settle = s
-- (only settlement and batch scripts have it). f(key, cost, at, commit) reads its N arguments from
-- ARGV[at] on and returns allowed (0|1), remaining, retry_after,
-- reset_after, delay, next and, optionally, mark: next is the time until
-- one more event fits (0 when remaining is the burst); mark is whatever
-- the algorithm's settle needs to know of the state the decision left (0
-- when absent). Durations are in microseconds, all integers (floor or
-- ceil after every division, so that state stored in Redis stays exact).
-- It reads the time from `now`. It stores the new state only if it allows
-- and commit is true, which the caller passes only for a cost above 0.
-- s(key, delta, at, remaining, reset, next, mark) settles a reservation
-- made at `reserved`, whose decision said remaining, reset, next and mark
-- of the limit: a delta below 0 gives back -delta events as far as the
-- limit still holds them; above 0 it charges delta more without denying
-- (a debt, at most max_debt µs long, that later decisions wait out).
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
local rid -- the reservation's id, or "" (settle: "+" for a prefetch's give-back)
local fetching = 0 -- the events a decision prefetches beyond its cost (decide.lua)
-- prefetch_lease: µs a meter keeps prefetched events counted at least
-- (gcra.lua; prefetchLease in core/prefetch.go)
local prefetch_lease = 20000
local reserved, reserved_n -- settle: when the reservation was made, and its n
local max_debt = 1125899906842624 -- 2^50 µs, about 35 years: keeps every value exact
local max_units = 2251799813685248 -- 2^51: the most units a meter's backlog or position reaches

-- expire sets key's time to live to us microseconds, in whole milliseconds,
-- at least one; or deletes it when there is nothing to keep.
local function expire(key, us)
  if us <= 0 then redis.call('DEL', key) return end
  redis.call('PEXPIRE', key, math.max(1, math.ceil(us / 1000)))
end

local algorithms = {}
