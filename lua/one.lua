-- one: ends a script that makes one decision.
--
-- KEYS    the decision's keys; ARGV its arguments (prelude.lua).
-- Reply   decide's (decide.lua).
return decide(1, #KEYS, 1)
