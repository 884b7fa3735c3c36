-- decide: follows the algorithms' files. decide(k, n, at) decides the n
-- limits of one decision; if all allow, it stores each one's new state,
-- else it stores nothing. quick(k, at) decides one limit by its
-- algorithm's fast path (prelude.lua), if it has one and the decision is
-- common: no reservation or prefetch, a cost of 0 or more.
--
-- KEYS    the decision's keys are KEYS[k .. k+n-1].
-- ARGV    its arguments start at ARGV[at], laid out as in prelude.lua. A
--         `more` above 0 asks for a prefetch: up to that many events more
--         than the cost, under every limit, as many as fit now. A cost
--         below 0 takes up to -cost ("take up to"): as many of them as the
--         limit has left, if it has any left, else 1 (which it denies).
-- Reply   decide returns, for several limits, {allowed, now, then per
--         limit: allowed, remaining, retry_after, reset_after, delay, next,
--         mark, epoch}: allowed is 0, or 1 plus the events a prefetch took
--         beyond the cost; now is the decision's clock, which a
--         reservation's settlement reads (0 when the decision makes no
--         reservation); a limit whose cost was "take up to" and which
--         allowed says 1 plus what it took (so at least 2) in place of its
--         allowed. When a limit denies, the limits that would have allowed
--         report their state as it stays: as for cost 0. For one limit, the
--         common case, it is shorter (every value Redis returns costs the
--         script time): {allowed, remaining, reset_after, next,
--         retry_after, delay, mark, epoch, now}, allowed being the limit's
--         (its "take up to" count, or the prefetch's), the values from
--         retry_after on left out when all are 0, and from delay on when
--         those are. quick returns that reply's values up to retry_after;
--         or nothing, having written nothing.
local function quick(k, at, now) -- now: clock(ARGV[at]), passed in (no upvalue)
  local key, name, sent, cost = KEYS[k], ARGV[at + 4], ARGV[at + 3], 1
  if ARGV[at + 1] ~= '' or ARGV[at + 2] ~= '0' then return end
  if sent ~= '1' then cost = sent + 0 end -- "1", the usual cost, without strtod
  if cost < 0 or now < 0 then return end -- before 1970: a key lives -now µs at least
  at = at + 5 -- the algorithm's own arguments; sent: the cost as sent, in decimal
--- fast paths ---
end
--- general ---
-- upto returns what a cost of "take up to -cost" takes under the limit of
-- key (algorithm alg, arguments from ARGV[at]): up to -cost of what is left,
-- or 1 if none (denied: the wait is for one); a cost of 0 or more is itself.
local function upto(key, cost, alg, at)
  if cost >= 0 then return cost end
  local _, remaining = alg.decide(key, 0, at, false)
  return math.max(1, math.min(-cost, remaining))
end

local function decide(k, n, at)
  now, rid, fetching = clock(ARGV[at]), ARGV[at + 1], tonumber(ARGV[at + 2])
  rid_n = tonumber(rid) or 0
  local stamp = rid == '' and 0 or now
  at = at + 3
  if fetching > 0 then -- as many more as fit now under every limit, up to more
    local a = at
    for i = 1, n do
      local cost, alg = tonumber(ARGV[a]), algorithms[ARGV[a + 1]]
      local _, remaining = alg.decide(KEYS[k + i - 1], 0, a + 2, false)
      fetching = math.max(0, math.min(fetching, remaining - cost))
      a = a + 2 + alg.args
    end
  end
  local more = fetching
  if n == 1 then -- one limit: decide and store in one pass
    local asked, alg = tonumber(ARGV[at]), algorithms[ARGV[at + 1]]
    local cost = asked + more
    if asked < 0 then cost = upto(KEYS[k], asked, alg, at + 2) + more end
    local allowed, remaining, retry, reset, delay, next, mark, epoch = alg.decide(KEYS[k], cost, at + 2, cost > 0)
    local said = allowed * (1 + more) -- a prefetch and "take up to" never meet
    if asked < 0 and allowed == 1 then said = 1 + cost end
    if stamp == 0 then mark, epoch = 0, 0 end -- no reservation: nothing settles it
    if delay == 0 and stamp == 0 and retry == 0 then return {said, remaining, reset, next} end
    if delay == 0 and stamp == 0 then return {said, remaining, reset, next, retry} end
    return {said, remaining, reset, next, retry, delay, mark or 0, epoch or 0, stamp}
  end
  -- Several: decide each without storing. Only if all allow, decide each
  -- again, storing: nothing changed in between, so the answers are the same.
  local reply, starts, costs, denied, w = {1 + more, stamp}, {}, {}, false, 8
  for i = 1, n do
    local alg, r = algorithms[ARGV[at + 1]], 3 + (i - 1) * w
    costs[i], starts[i] = upto(KEYS[k + i - 1], tonumber(ARGV[at]), alg, at + 2) + more, at
    reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5], reply[r + 6], reply[r + 7] =
      alg.decide(KEYS[k + i - 1], costs[i], at + 2, false)
    denied = denied or reply[r] == 0
    at = at + 2 + alg.args
  end
  for i = 1, n do
    local cost, alg, r = costs[i], algorithms[ARGV[starts[i] + 1]], 3 + (i - 1) * w
    -- all allow: store (the same answers, but a prefetch's that counts
    -- more); one denies: those that would allow report the state they keep
    if cost > 0 and (not denied or reply[r] == 1) then
      reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5], reply[r + 6], reply[r + 7] =
        alg.decide(KEYS[k + i - 1], denied and 0 or cost, starts[i] + 2, not denied)
    end
    reply[r + 6], reply[r + 7] = reply[r + 6] or 0, reply[r + 7] or 0
    if not denied and tonumber(ARGV[starts[i]]) < 0 then reply[r] = 1 + cost end
  end
  if denied then reply[1] = 0 end
  return reply
end
