-- The waits of the plugin's HTTP/2 client (harp.h2) on its socket, timed on harp.clock's monotonic
-- clock. luasocket times its own waits on gettimeofday, each from the start of the receive or send
-- that makes it: a wall clock stepped back (NTP, `date -s`) while a reply was partly in made the
-- next wait of that receive last as long as the step (8 s against a 50 ms deadline), with
-- slurmctld's locks held. With lua-posix's poll, luasocket never waits (timeout 0, which reads no
-- clock either): each wait is one poll(2) for the time left on harp.clock, recomputed after a signal.
-- Without posix.poll, luasocket waits on its own timeouts as before; M.source says which.
--   M.polls                            -> true when the waits are here
--   M.ready(sock, deadline[, left])    -> true | nil, "timeout" | nil, err   (something to read)
--   M.send(sock, data, deadline)       -> true | nil, "timeout" | nil, err   (all of data written)
-- left: the time to the deadline when the caller has just read the clock (a read costs 0.6 µs).

local now = require "harp.clock".now

local floor, pcall, require, tostring, type = math.floor, pcall, require, tostring, type

local M = {}

local rpoll, poll
local okp, mod = pcall(require, "posix.poll")
if okp and type(mod) == "table" and type(mod.rpoll) == "function" and type(mod.poll) == "function" then
  rpoll, poll = mod.rpoll, mod.poll
  M.source = "posix.poll on harp.clock"
else
  M.source = "luasocket's timeouts on the wall clock (no posix.poll: "
    .. (tostring(mod):match("^[^\n]*"):gsub(":$", "")) .. ")"
end
M.polls = rpoll ~= nil

local oke, errno = pcall(require, "posix.errno")
local EINTR = oke and type(errno) == "table" and errno.EINTR or 4 -- Linux's
local OUT = {OUT = true}
local MAX_MS = 86400000 -- poll(2) takes an int

-- One poll(2) a turn until the socket is ready or the deadline has passed; a signal (EINTR) only
-- makes another turn, for the time then left. A poll that ends up to a millisecond before the
-- deadline (it waits whole milliseconds, as luasocket did) is the deadline.
local function wait(sock, deadline, left, out)
  local fd = sock:getfd()
  if fd < 0 then return nil, "closed" end
  while true do
    left = left or deadline - now()
    if left <= 0 then return nil, "timeout" end
    local ms = floor(left * 1000)
    if ms > MAX_MS then ms = MAX_MS end
    local n, err, code
    if out then
      n, err, code = poll({[fd] = {events = OUT}}, ms)
    else
      n, err, code = rpoll(fd, ms)
    end
    if n then
      if n > 0 then return true end
      return nil, "timeout"
    end
    if code ~= EINTR then return nil, "poll: " .. tostring(err) end
    left = nil
  end
end

function M.ready(sock, deadline, left)
  return wait(sock, deadline, left, false)
end

-- luasocket's send at timeout 0 writes what the socket takes and answers "timeout" with the index of
-- the last byte written: the rest waits for room. deadline nil: no wait.
function M.send(sock, data, deadline)
  if not poll then
    local left = deadline and deadline - now() or 0
    sock:settimeout(left > 0 and left or 0, "t")
    local sent, err = sock:send(data)
    if sent then return true end
    return nil, err
  end
  local i = 1
  while true do
    local sent, err, last = sock:send(data, i)
    if sent then return true end
    if err ~= "timeout" or not deadline then return nil, err end
    i = last + 1
    local ok, werr = wait(sock, deadline, nil, true)
    if not ok then return nil, werr end
  end
end

return M
