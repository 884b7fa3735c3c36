-- decide: decide(k, n, at) decides the n limits of one decision, all or
-- nothing: if every limit allows, it stores each one's new state, else it
-- stores nothing. internal/wire/wire.go is its Go side.
--
-- KEYS    the limits' states: KEYS[k .. k+n-1], in order; they share one
--         hash tag (one slot).
-- ARGV    from ARGV[at]: the clock (µs, or "" to read the Redis clock, so
--         that one key always sees one clock); the id of the reservation
--         or prefetch the decision makes, a decimal below 2^52 ("" for
--         none): it names slots, log entries and a meter's epoch; more,
--         the events a prefetch asks for beyond the cost (0 for none): the
--         decision takes as many of them as fit now under every limit;
--         then per limit, in the order of its keys: its cost (>= 0; 0
--         reports the state), 1 if it takes up to its cost ("take up to":
--         as many as it has left, if it has any, else it is denied as for
--         one) or 0, the name of its algorithm, then that algorithm's own
--         arguments.
-- Reply   {allowed, clock, fetched, then per limit: allowed, remaining,
--         retry_after, reset_after, delay, next, taken, mark, epoch}:
--         allowed is 1 if every limit allowed, else 0; clock the
--         decision's, in µs, which a settlement sends back (0 when it
--         makes no reservation or prefetch); fetched what a prefetch took
--         beyond the cost; per limit, taken is what "take up to" took (0
--         for a limit that does not), mark and epoch what its settlement
--         sends back (0 without a reservation or prefetch). The last
--         limit's taken, mark and epoch are left out when they are 0 at
--         the end of the reply (wire.ReadDecision reads them as 0), as the
--         fast paths' replies leave them out (first.lua). When a limit
--         denies, the others report their state as it stays. Durations
--         in µs.
local limit_width = 9 -- values per limit in the reply (wire.go's limitWidth)

-- upto returns the cost of a limit that takes up to `cost` (algorithm
-- alg, arguments from ARGV[at]): up to cost of what is left, or 1 if
-- none is (denied: the wait is for one); 0, a look, for up to nothing.
local function upto(key, cost, alg, at)
  if cost <= 0 then return 0 end
  local _, remaining = alg.decide(key, 0, at, false)
  return math.max(1, math.min(cost, remaining))
end

-- trimmed leaves out the last limit's taken, mark and epoch where they
-- end the reply as 0s.
local function trimmed(reply)
  for _ = 1, 3 do
    if reply[#reply] ~= 0 then break end
    reply[#reply] = nil
  end
  return reply
end

local function decide(k, n, at)
  now, rid, fetching = clock(ARGV[at]), ARGV[at + 1], tonumber(ARGV[at + 2])
  rid_n = tonumber(rid) or 0
  at = at + 3
  local algs, starts, costs, took = {}, {}, {}, {}
  for i = 1, n do -- each limit's algorithm, arguments and cost
    local alg, key, cost = algorithms[ARGV[at + 2]], KEYS[k + i - 1], tonumber(ARGV[at])
    took[i] = 0
    if ARGV[at + 1] == '1' then cost = upto(key, cost, alg, at + 3); took[i] = cost end
    if fetching > 0 then -- as many more as fit now under every limit
      local _, remaining = alg.decide(key, 0, at + 3, false)
      fetching = math.max(0, math.min(fetching, remaining - cost))
    end
    algs[i], starts[i], costs[i] = alg, at + 3, cost
    at = at + 3 + alg.args
  end
  local reply, denied = {1, rid ~= '' and now or 0, fetching}, false
  -- decided stores limit i's answer in the reply; it reports whether it allowed.
  local function decided(i, ...)
    local r = 4 + (i - 1) * limit_width
    reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5], reply[r + 7], reply[r + 8] = ...
    reply[r + 6], reply[r + 7], reply[r + 8] = took[i], reply[r + 7] or 0, reply[r + 8] or 0
    if rid == '' then reply[r + 7], reply[r + 8] = 0, 0 end -- nothing settles it
    return reply[r] == 1
  end
  if n == 1 then -- one limit: decide and store in one pass
    local cost = costs[1] + fetching
    if not decided(1, algs[1].decide(KEYS[k], cost, starts[1], cost > 0)) then reply[1], reply[3] = 0, 0 end
    return trimmed(reply)
  end
  -- Several: decide each without storing; only if all allow, decide each
  -- again, storing: nothing changed in between, so the answers are the
  -- same. When one denies, those that would allow report the state they
  -- keep.
  for i = 1, n do
    denied = not decided(i, algs[i].decide(KEYS[k + i - 1], costs[i] + fetching, starts[i], false)) or denied
  end
  for i = 1, n do
    local cost = costs[i] + fetching
    if cost > 0 and (not denied or reply[4 + (i - 1) * limit_width] == 1) then
      decided(i, algs[i].decide(KEYS[k + i - 1], denied and 0 or cost, starts[i], not denied))
    end
  end
  if denied then reply[1], reply[3] = 0, 0 end
  return trimmed(reply)
end
