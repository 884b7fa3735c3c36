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
-- Reply   per limit, in the order of its keys: allowed, remaining,
--         reset_after, next, retry_after, delay, taken, mark, epoch; then
--         the decision's clock and fetched. The decision allows if every
--         limit allows. taken is what "take up to" took (0 for a limit
--         that does not); mark and epoch what its settlement sends back,
--         and clock the decision's, in µs (0 without a reservation or
--         prefetch); fetched what a prefetch took beyond the cost. Values
--         that end the reply as 0 are left out, down to the last limit's
--         allowed (wire.ReadDecision reads them as 0): a common decision
--         replies 4 or 5 values (first.lua). When a limit denies, the
--         others report their state as it stays. Durations in µs.
local limit_width = 9 -- values per limit in the reply (wire.go's limitWidth)

-- upto returns the cost of a limit that takes up to `cost` (algorithm
-- alg, arguments from ARGV[at]): up to cost of what is left, or 1 if
-- none is (denied: the wait is for one); 0, a look, for up to nothing.
local function upto(key, cost, alg, at)
  if cost <= 0 then return 0 end
  local _, remaining = alg.decide(key, 0, at, false)
  return math.max(1, math.min(cost, remaining))
end

-- trimmed leaves out the values that end reply, the reply of n limits,
-- as 0s, down to the last limit's allowed.
local function trimmed(reply, n)
  local keep = (n - 1) * limit_width + 1
  while #reply > keep and reply[#reply] == 0 do reply[#reply] = nil end
  return reply
end

-- answer puts a limit's answer (its algorithm's decide's values and what
-- it took up to) in reply from r on; it reports whether it allowed.
local function answer(reply, r, taken, allowed, remaining, retry, reset, delay, next, mark, epoch)
  if rid == '' then mark, epoch = 0, 0 end -- nothing settles it
  reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = allowed, remaining, reset, next, retry
  reply[r + 5], reply[r + 6], reply[r + 7], reply[r + 8] = delay, taken, mark or 0, epoch or 0
  return allowed == 1
end

-- cost_of returns the cost of the limit whose arguments start at ARGV[at]
-- (key and algorithm alg), and what it takes up to (0 if it does not);
-- and lowers `fetching` to what fits under it.
local function cost_of(key, alg, at)
  local cost, taken = tonumber(ARGV[at]), 0
  if ARGV[at + 1] == '1' then cost = upto(key, cost, alg, at + 3); taken = cost end
  if fetching > 0 then -- as many more as fit now under every limit
    local _, remaining = alg.decide(key, 0, at + 3, false)
    fetching = math.max(0, math.min(fetching, remaining - cost))
  end
  return cost, taken
end

-- one decides a single limit, its arguments from ARGV[at]: decide and
-- store in one pass.
local function one(k, at)
  local alg, key = algorithms[ARGV[at + 2]], KEYS[k]
  local cost, taken = cost_of(key, alg, at)
  cost = cost + fetching
  local allowed, remaining, retry, reset, delay, next, mark, epoch = alg.decide(key, cost, at + 3, cost > 0)
  if rid == '' then mark, epoch = 0, 0 end -- nothing settles it
  if allowed == 0 then fetching = 0 end
  return trimmed({allowed, remaining, reset, next, retry, delay, taken, mark or 0, epoch or 0,
    rid ~= '' and now or 0, fetching}, 1)
end

local function decide(k, n, at)
  now, rid, fetching = clock(ARGV[at]), ARGV[at + 1], tonumber(ARGV[at + 2])
  rid_n = tonumber(rid) or 0
  at = at + 3
  if n == 1 then return one(k, at) end
  local algs, starts, costs, took = {}, {}, {}, {}
  for i = 1, n do -- each limit's algorithm, arguments and cost
    local alg = algorithms[ARGV[at + 2]]
    costs[i], took[i] = cost_of(KEYS[k + i - 1], alg, at)
    algs[i], starts[i] = alg, at + 3
    at = at + 3 + alg.args
  end
  -- Decide each without storing; only if all allow, decide each again,
  -- storing: nothing changed in between, so the answers are the same.
  -- When one denies, those that would allow report the state they keep.
  local reply, denied = {}, false
  for i = 1, n do
    local key, r = KEYS[k + i - 1], 1 + (i - 1) * limit_width
    denied = not answer(reply, r, took[i], algs[i].decide(key, costs[i] + fetching, starts[i], false)) or denied
  end
  for i = 1, n do
    local cost, r = costs[i] + fetching, 1 + (i - 1) * limit_width
    if cost > 0 and (not denied or reply[r] == 1) then
      answer(reply, r, took[i], algs[i].decide(KEYS[k + i - 1], denied and 0 or cost, starts[i], not denied))
    end
  end
  reply[n * limit_width + 1], reply[n * limit_width + 2] = rid ~= '' and now or 0, denied and 0 or fetching
  return trimmed(reply, n)
end
