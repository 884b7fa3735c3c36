-- one: ends a script that makes one decision. Its first part runs before
-- the script defines anything the general path needs (lua.go): a common
-- decision of one limit that its algorithm's fast path takes ends there.
--
-- KEYS    the decision's keys; ARGV its arguments (prelude.lua).
-- Reply   decide's (decide.lua).
if #KEYS == 1 then
  local allowed, remaining, reset, next, retry = quick(1, 1, clock(ARGV[1]))
  if retry == 0 then return {allowed, remaining, reset, next} end
  if allowed then return {allowed, remaining, reset, next, retry} end
end
--- general ---
return decide(1, #KEYS, 1)
