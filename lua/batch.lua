-- batch: ends a script that makes several independent decisions and
-- settlements in one call, one after another, each as one.lua or
-- one_settle.lua would; the engine sends the calls that wait together this
-- way to a single Redis server, whose per-call cost it then pays once.
--
-- KEYS    every call's keys, one call after another.
-- ARGV    per call: n, its number of keys, negative for a settlement;
--         m, its number of arguments; then its m arguments (prelude.lua,
--         settle.lua).
-- Reply   per call, in order: the length of decide's or settle's reply
--         (at least 1), then that reply; or, when
--         Redis refused one of its commands (WRONGTYPE, OOM, READONLY),
--         -len, then the error message (len bytes, at most 240) packed six
--         bytes to an integer, big-endian, the last holding the rest. A
--         call's error stops only that call; what it stored before the
--         error stays, as it would in a script of its own.
local out, k, at, decide, settle = {}, 1, 1, nil, nil -- decide, settle: general's
while at <= #ARGV do
  local n, m = ARGV[at] + 0, ARGV[at + 1] + 0
  local ok, reply, remaining, reset, next, retry = true, nil
  if n == 1 then -- first the fast path, as one.lua
    ok, reply, remaining, reset, next, retry = pcall(quick, k, at + 2, clock(ARGV[at + 2]))
  end
  if ok and not reply then
    if not decide then decide, settle = general() end
    if n < 0 then ok, reply = pcall(settle, k, -n, at + 2) else ok, reply = pcall(decide, k, n, at + 2) end
  end
  if n < 0 then n = -n end
  local o = #out
  if ok and retry then -- quick's values
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 4, reply, remaining, reset, next
    if retry ~= 0 then out[o + 1], out[o + 6] = 5, retry end
  elseif ok then
    out[o + 1] = #reply
    for i = 1, #reply do out[o + 1 + i] = reply[i] end
  else
    local msg = type(reply) == 'table' and tostring(reply.err) or tostring(reply)
    -- a Redis error raised as a string (miniredis) has Lua's position first
    msg = string.sub(string.gsub(msg, '^[^ ]*:%d+: (%u+ )', '%1'), 1, 240)
    out[#out + 1] = -#msg
    for i = 1, #msg, 6 do
      local v = 0
      for j = i, math.min(i + 5, #msg) do v = v * 256 + string.byte(msg, j) end
      out[#out + 1] = v
    end
  end
  k, at = k + n, at + 2 + m
end
return out
