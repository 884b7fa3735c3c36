-- one_settle: ends a script that settles one reservation.
--
-- KEYS    the reservation's keys; ARGV its arguments (settle.lua).
-- Reply   settle's (settle.lua).
return settle(1, #KEYS, 1)
