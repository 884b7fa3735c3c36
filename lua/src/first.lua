-- first: answers the common call before the rest of the script is
-- defined: a decision of one limit that its algorithm's fast path answers
-- (no reservation, no prefetch, no "take up to"). Redis then makes, on
-- that call, none of the functions only the other calls need
-- (docs/performance.md). main.lua answers every other call, and uses
-- quick for the decisions of a batch.
--
-- KEYS    see main.lua.
-- ARGV    see main.lua.
-- Reply   decide.lua's, its values from retry_after on left out when
--         they are 0 (from delay on for a denial), which
--         wire.ReadDecision reads as 0.

-- quick answers a decision of one limit with its algorithm's fast path
-- (<algorithm>_fast(key, cost, at, now, sent): cost >= 0, its arguments
-- from ARGV[at], now the call's clock, sent the cost as sent), if it has
-- one and the decision is common (no reservation, no prefetch, no "take
-- up to"), in decide's reply; or returns nothing, having written nothing.
local function quick(k, at)
  if ARGV[at + 1] ~= '' or ARGV[at + 2] ~= '0' or ARGV[at + 4] ~= '0' then return end
  local name, f = ARGV[at + 5], nil
--- fast paths ---
  if not f then return end
  local now = clock(ARGV[at])
  if now < 0 then return end -- before 1970: a key lives -now µs at least, which the general path does
  local sent = ARGV[at + 3]
  local cost = 1
  if sent ~= '1' then cost = sent + 0 end -- "1", the usual cost, without strtod
  local allowed, remaining, retry, reset, next = f(KEYS[k], cost, at + 6, now, sent)
  if not allowed then return end
  if retry == 0 then return {allowed, remaining, reset, next} end
  return {allowed, remaining, reset, next, retry}
end

if ARGV[1] == 'd' and #KEYS == 1 then
  local reply = quick(1, 2)
  if reply then return reply end
end
