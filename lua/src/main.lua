-- main: ends every script that decides or settles limits. internal/wire
-- is its Go side.
--
-- KEYS    every key the call's decisions and settlements name, in order.
-- ARGV    ARGV[1] says what the call is: "d", one decision, its arguments
--         from ARGV[2] (decide.lua); "s", one settlement (settle.lua); or
--         "b", a batch: several decisions and settlements, one after
--         another, each as "d" or "s", its number of keys, its number of
--         arguments, then its arguments. The engine sends what waits for
--         one server together this way, so that Redis pays its cost per
--         call (parsing, finding the script, KEYS and ARGV) once.
-- Reply   a decision's or a settlement's reply; a batch's: per call, in
--         order, 1, the length of its reply and its reply; or 0 for a
--         call that raised an error (WRONGTYPE, a calendar window the
--         Redis clock is outside of, OOM at its first write). Every
--         algorithm reads its state before it writes, and Redis refuses
--         only a script's first write, so such a call wrote nothing: the
--         engine sends it again alone, and Redis's error is its answer.
--         The other calls of the batch are answered as alone.
local decide, settlement -- general's: defined the first time a call needs them
local settle -- settlement's: defined the first time a call settles

-- call makes one decision ("d") or settlement ("s") of n keys from KEYS[k],
-- its arguments from ARGV[at].
local function call(kind, k, n, at)
  if kind == 'd' and n == 1 then
    local reply = quick(k, at)
    if reply then return reply end
  end
  if not decide then decide, settlement = general() end
  if kind == 'd' then return decide(k, n, at) end
  if not settle then settle = settlement() end
  return settle(k, n, at)
end

if ARGV[1] ~= 'b' then return call(ARGV[1], 1, #KEYS, 2) end
local out, k, at = {}, 1, 2
while at <= #ARGV do
  local n, m = ARGV[at + 1] + 0, ARGV[at + 2] + 0
  local ok, reply = pcall(call, ARGV[at], k, n, at + 3)
  if ok then
    local o = #out
    out[o + 1], out[o + 2] = 1, #reply
    for i = 1, #reply do out[o + 2 + i] = reply[i] end
  else
    out[#out + 1] = 0
  end
  k, at = k + n, at + 3 + m
end
return out
