-- body: the start of the general path (head.lua): what every algorithm,
-- decide.lua and settle.lua share.
--
-- KEYS    none of its own.
-- ARGV    none of its own.
-- Reply   none of its own.
--
-- Each algorithm file adds algorithms.<name> = {args = N, kind = T,
-- decide = f}, then, after its "--- settle ---" line (defined only when a
-- call settles: internal/assemble), algorithms.<name>.settle = s: N is how many arguments it reads after its
-- name, T the Redis type of its state (a settlement of several limits
-- checks it before it writes anything). f(key, cost, at, commit) reads its
-- arguments from ARGV[at] on and returns allowed (0|1), remaining,
-- retry_after, reset_after, delay, next and, optionally, mark and epoch:
-- next is the time until one more event fits (0 when remaining is the
-- burst); mark and epoch are what the algorithm's settle needs to know of
-- the state the decision left (meter.lua; 0 when absent). Durations are
-- in microseconds, all integers (floor or ceil after every division, so
-- that state stored in Redis stays exact). It reads the time from `now`.
-- It stores the new state only if it allows and commit is true, which the
-- caller passes only for a cost above 0; it reads before it writes, so
-- that an error (WRONGTYPE) leaves nothing written. s(key, delta, at,
-- reset, mark, epoch, debt) settles a reservation made at `reserved`,
-- whose decision said reset, mark and epoch of the limit: a delta below 0
-- gives back -delta events as far as the limit still holds them; above 0
-- it charges delta more without denying (a debt: the state stays in debt
-- at most `debt` µs longer than the limit's full allowance takes to come
-- back).
local rid -- the reservation's (or prefetch's) id, or "": names its slots and log entries
local rid_n = 0 -- rid as a number, 0 for none: a meter's epoch (meter.lua)
local fetching = 0 -- the events a decision prefetches beyond its cost (decide.lua)
local giveback = false -- settle: a prefetch's give-back (meter.lua)
-- prefetch_lease: µs a meter keeps prefetched events counted at least
-- (gcra.lua; prefetchLease in core/prefetch.go)
local prefetch_lease = 20000
local reserved, reserved_n -- settle: when the reservation was made (nil: unknown), and its n
local max_units = 2251799813685248 -- 2^51: the most units a meter's backlog or position reaches

-- expire sets key's time to live to us microseconds, in whole milliseconds,
-- at least one; or deletes it when there is nothing to keep.
local function expire(key, us)
  if us <= 0 then redis.call('DEL', key) return end
  redis.call('PEXPIRE', key, math.max(1, math.ceil(us / 1000)))
end

local algorithms = {}
