-- settle: ends a script that settles a reservation (core.Reservation's
-- Settle and Release): every limit of the reservation gives back or
-- charges the difference between the true cost and the reserved n, and
-- concurrency limits free the reservation's slots.
--
-- KEYS    the reservation's keys, one per limit.
-- ARGV    now ("" for the Redis clock); the reservation's id; the µs it was
--         made at (its decision's now); its n; then per limit, in the order
--         of its keys: delta (the true cost less n), what the decision said
--         of the limit (remaining, reset_after and next, µs), the name of
--         its algorithm and its arguments, as for the decision.
-- Reply   {1}.
now, rid, reserved, reserved_n = clock(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local at = 5
for i = 1, #KEYS do
  local delta, alg = tonumber(ARGV[at]), algorithms[ARGV[at + 4]]
  if delta ~= 0 or alg.holds then
    alg.settle(KEYS[i], delta, at + 5, tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]))
  end
  at = at + 5 + alg.args
end
return {1}
