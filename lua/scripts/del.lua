-- del: forget the state of one identity.
-- KEYS    every key one algorithm keeps for it (one hash tag, one slot).
-- ARGV    none.
-- Reply   {the number of keys removed}: an array, as every script's reply.
return {redis.call('DEL', unpack(KEYS))}
