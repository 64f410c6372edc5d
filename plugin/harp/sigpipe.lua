-- SIGPIPE for harp.h2's writes, settled once when the module loads: M.state says what a write to a
-- server that has hung up does to this process ("blocked", "ignored", "ignored by harp.sigpipe",
-- "delivered", or "unknown" without /proc).
--
-- A write to a server that has hung up raises SIGPIPE, whose default action ends the process, and
-- luasocket's send has no MSG_NOSIGNAL. slurmctld blocks SIGPIPE in all its threads (checked on
-- 22.05), so there the write just fails (EPIPE) and nothing is changed. Where the calling thread
-- neither blocks nor ignores it (a standalone Lua: the tests' driver), it is ignored, with lua-posix.
local open, pcall, require, tonumber, type = io.open, pcall, require, tonumber, type
local sub = string.sub

local function sigpipe_state()
  local f = open("/proc/thread-self/status", "r") or open("/proc/self/status", "r")
  if not f then return "unknown" end
  local text = f:read("*a")
  f:close()
  local function bit13(mask) -- SIGPIPE is signal 13: bit 12, in the 4th hex digit from the right
    local digit = mask and tonumber(sub(mask, -4, -4), 16)
    return digit ~= nil and digit % 2 == 1
  end
  if bit13(text:match("SigBlk:%s*(%x+)")) then return "blocked" end
  if bit13(text:match("SigIgn:%s*(%x+)")) then return "ignored" end
  local ok, psignal = pcall(require, "posix.signal")
  if ok and type(psignal) == "table" and pcall(psignal.signal, psignal.SIGPIPE, psignal.SIG_IGN) then
    return "ignored by harp.sigpipe"
  end
  return "delivered" -- a write to a closed connection would end this process
end

return {state = sigpipe_state()}
