-- The client's waits end at the deadline on the monotonic clock, whatever the wall clock does.
-- harp.grpc runs on a simulated host: harp.clock reads its monotonic clock, luasocket's socket is a
-- stand-in that times its waits as luasocket 3.1 does (gettimeofday, the wall clock, from the start
-- of each receive or send: buffer.c, timeout.c, usocket.c), and posix.poll's poll(2) is simulated.
-- Time passes only in waits; the server's bytes, room in the socket, wall clock steps and signals
-- come at set times on the monotonic clock.
local T = ...
local wire = require "harp.h2_wire"

local floor, huge, max, min = math.floor, math.huge, math.max, math.min

-- events: {at = s, data = bytes | wall = step (s) | room = bytes | signal = true}, in time order
local function host(events, room)
  local h = {mono = 0, offset = 0, inbox = "", room = room or huge, sent = "", next = 1,
    polls = 0, socket_waits = 0}
  function h.wall()
    return h.mono + h.offset
  end
  -- -> "ready" | "timeout" | "signal"
  function h.pass(seconds, ready)
    local stop = h.mono + seconds
    while not ready() do
      local e = events[h.next]
      if not e or e.at > stop then
        h.mono = max(h.mono, stop)
        return "timeout"
      end
      h.next = h.next + 1
      h.mono = max(h.mono, e.at)
      if e.data then h.inbox = h.inbox .. e.data end
      if e.wall then h.offset = h.offset + e.wall end
      if e.room then h.room = h.room + e.room end
      if e.signal then return "signal" end
    end
    return "ready"
  end
  function h.readable()
    return h.inbox ~= ""
  end
  function h.writable()
    return h.room > 0
  end
  return h
end

-- luasocket's unix stream socket, its timeouts as in luasocket 3.1
local function luasocket(h)
  local s = {block = -1, total = -1, start = 0, buf = ""}
  local function retry() -- timeout_getretry: from the operation's start, on the wall clock
    local elapsed = h.wall() - s.start
    if s.block < 0 and s.total < 0 then return -1 end
    if s.block < 0 then return max(s.total - elapsed, 0) end
    if s.total < 0 then return max(s.block - elapsed, 0) end
    return min(s.block, max(s.total - elapsed, 0))
  end
  local function waitfd(ready) -- socket_waitfd: poll(2), again after EINTR
    if s.block == 0 then return "timeout" end
    while true do
      local ms = floor(retry() * 1000)
      h.socket_waits = h.socket_waits + 1
      local got = h.pass(ms < 0 and huge or ms / 1000, ready)
      if got == "ready" then return nil end
      if got == "timeout" then return "timeout" end
    end
  end
  local function recv() -- socket_recv into luasocket's buffer (8 KiB)
    while h.inbox == "" do
      local err = waitfd(h.readable)
      if err then return err end
    end
    s.buf, h.inbox = h.inbox:sub(1, 8192), h.inbox:sub(8193)
  end
  function s.settimeout(_, t, mode)
    if mode == "t" or mode == "r" then s.total = t or -1 else s.block = t or -1 end
    return 1
  end
  function s.connect()
    return 1
  end
  function s.getfd()
    return 7
  end
  function s.dirty()
    return s.buf ~= ""
  end
  function s.close()
    return 1
  end
  function s.receive(_, n) -- buffer_meth_receive and recvraw: nil, err, partial
    s.start = h.wall()
    local got = ""
    while #got < n do
      if s.buf == "" then
        local err = recv()
        if err then return nil, err, got end
      end
      local k = min(#s.buf, n - #got)
      got, s.buf = got .. s.buf:sub(1, k), s.buf:sub(k + 1)
    end
    return got
  end
  function s.send(_, data, i) -- buffer_meth_send and socket_send: nil, err, last index sent
    s.start = h.wall()
    local last = (i or 1) - 1
    while last < #data do
      if h.room > 0 then
        local k = min(h.room, #data - last, 8192)
        h.sent, h.room, last = h.sent .. data:sub(last + 1, last + k), h.room - k, last + k
      else
        local err = waitfd(h.writable)
        if err then return nil, err, last end
      end
    end
    return last
  end
  return s
end

-- posix.poll: rpoll(fd, ms) and poll({[fd] = {events = {OUT = true}}}, ms); EINTR on a signal
local function poller(h)
  local function wait(ms, ready)
    h.polls = h.polls + 1
    local got = h.pass(ms / 1000, ready)
    if got == "signal" then return nil, "Interrupted system call", 4 end
    return got == "ready" and 1 or 0
  end
  return {
    rpoll = function(_, ms) return wait(ms, h.readable) end,
    poll = function(fds, ms)
      local _, entry = next(fds)
      T.ok(entry.events.OUT, "poll for room to write")
      return wait(ms, h.writable)
    end,
  }
end

-- harp.grpc (and harp.h2, harp.wait...) loaded fresh on host h, with posix.poll or without
local function client(h, with_poll)
  local names = {"socket.unix", "posix.poll", "harp.clock"}
  local saved, preload = {}, package.preload["posix.poll"]
  for k, v in pairs(package.loaded) do
    if k:sub(1, 5) == "harp." then names[#names + 1] = k end
    saved[k] = v
  end
  for _, k in ipairs(names) do package.loaded[k] = nil end
  package.loaded["harp.clock"] = {now = function() return h.mono end, source = "the simulated host"}
  package.loaded["socket.unix"] = function() return luasocket(h) end
  if with_poll then
    package.loaded["posix.poll"] = poller(h)
  else
    package.preload["posix.poll"] = function() error("no posix.poll on this host") end
  end
  local ok, grpc = pcall(require, "harp.grpc")
  for k in pairs(package.loaded) do
    if k:sub(1, 5) == "harp." then package.loaded[k] = nil end
  end
  for _, k in ipairs(names) do package.loaded[k] = saved[k] end
  package.preload["posix.poll"] = preload
  assert(ok, grpc)
  grpc.precheck = false
  return grpc
end

-- The server's answer to stream `sid`: SETTINGS, HEADERS, the message "ok", trailers.
local function answer(sid)
  return wire.frame(wire.SETTINGS, 0, 0, ""),
    wire.frame(wire.HEADERS, wire.END_HEADERS, sid, "\136\15\16\16application/grpc") -- :status 200
    .. wire.frame(wire.DATA, 0, sid, "\0\0\0\0\2ok")
    .. wire.frame(wire.HEADERS, wire.END_HEADERS + wire.END_STREAM, sid, "\0\11grpc-status\1" .. "0")
end

local DEADLINE = 0.05
local function call(grpc, h)
  local t0 = h.mono
  local reply, err = grpc.call("/run/harp.sock", "/harp.v1.Predictor/Predict", "req", DEADLINE)
  return reply, err, h.mono - t0
end

local function ended_at_the_deadline(err, took)
  T.eq(err, "deadline exceeded", "error")
  T.ok(took <= DEADLINE + 1e-9, string.format("returned %.3f s after the call began, deadline %.3f s: %s",
    took, DEADLINE, "the wall clock's step held the call"))
end

T.test("the wall clock stepped back while an answer is partly in: the call ends at its deadline", function()
  local settings, rest = answer(1)
  local h = host {
    {at = 0.005, data = settings .. rest:sub(1, 29)}, -- SETTINGS, the answer's header block
    {at = 0.010, wall = -8}, -- NTP, or `date -s`
    {at = 0.020, data = rest:sub(30, 33)}, -- 4 bytes of the next frame's 9-byte header
    {at = 30, data = rest:sub(34)},
  }
  local _, err, took = call(client(h, true), h)
  ended_at_the_deadline(err, took)
  T.eq(h.socket_waits, 0, "luasocket never waited on its own timer")
end)

T.test("a signal during a wait after a wall clock step: the wait goes on for the time left", function()
  local settings, rest = answer(1)
  local h = host {
    {at = 0.005, data = settings .. rest:sub(1, 29)},
    {at = 0.010, wall = -8},
    {at = 0.020, signal = true}, -- EINTR
    {at = 0.030, signal = true},
    {at = 30, data = rest:sub(30)},
  }
  local _, err, took = call(client(h, true), h)
  ended_at_the_deadline(err, took)
  T.ok(h.polls >= 4, "each EINTR was one more poll (" .. h.polls .. ")")
end)

T.test("the wall clock stepped back while a request waits for room: the call ends at its deadline", function()
  local settings, rest = answer(1)
  local h = host({
    {at = 0.010, wall = -8},
    {at = 0.020, room = 10}, -- the server reads 10 bytes of the request, then no more
    {at = 30, room = 1e6},
    {at = 30, data = settings .. rest},
  }, 40)
  local _, err, took = call(client(h, true), h)
  ended_at_the_deadline(err, took)
  T.eq(#h.sent, 50, "what the socket took was written")
end)

T.test("one poll a wait, and none for what is already in", function()
  local settings, rest = answer(1)
  local _, rest3 = answer(3)
  local h = host {
    {at = 0.001, data = settings .. rest},
    {at = 0.020, data = rest3:sub(1, 20)},
    {at = 0.022, data = rest3:sub(21)},
  }
  local grpc = client(h, true)
  local reply, err = call(grpc, h)
  T.eq(reply, "ok", err)
  T.eq(h.polls, 1, "polls for the first answer, all of it in one piece")
  T.ok(grpc.connected(), "the connection is kept")
  reply, err = call(grpc, h)
  T.eq(reply, "ok", err)
  T.eq(h.polls, 3, "polls for the second, in two pieces")
  T.eq(h.socket_waits, 0, "luasocket never waited on its own timer")
  T.eq(grpc.degraded, nil, "nothing to say at configure")
end)

T.test("without posix.poll: luasocket's waits as before, and harp.main says so once", function()
  local settings, rest = answer(1)
  local h = host {{at = 0.001, data = settings .. rest}}
  local grpc = client(h, false)
  local reply, err = call(grpc, h)
  T.eq(reply, "ok", err)
  T.eq(h.polls, 0, "no poll")
  T.ok(h.socket_waits > 0, "luasocket waited")
  T.ok(grpc.degraded and grpc.degraded:find("no posix.poll", 1, true), tostring(grpc.degraded))
  local saved = {}
  for k, v in pairs(package.loaded) do
    if k:sub(1, 5) == "harp." then saved[k], package.loaded[k] = v, nil end
  end
  package.loaded["harp.grpc"] = grpc -- what harp.transport loads
  local ok, cerr = pcall(function()
    require "harp.main".configure {socket = "/run/harp.sock", deadline_ms = 50, breaker_seconds = 30}
  end)
  for k in pairs(package.loaded) do
    if k:sub(1, 5) == "harp." then package.loaded[k] = saved[k] end
  end
  T.ok(ok, cerr)
  T.ok(T.logged("info", "a wall clock stepped back may hold a call past its deadline"), "logged at configure")
end)

T.test("without posix.poll: a frame owed that waited for room leaves the read only the time then left", function()
  -- The request fits the socket; the server's SETTINGS is owed an ACK, for which room comes at 40 ms:
  -- the read after it waited the 45 ms left before that write, and the call took 85 ms of its 50.
  local settings = answer(1)
  local probe = host {{at = 0.001, data = settings}}
  call(client(probe, false), probe)
  local request_bytes = #probe.sent - 9 -- all but the ACK (an empty SETTINGS frame)
  local h = host({{at = 0.005, data = settings}, {at = 0.040, room = 1e6}}, request_bytes)
  local _, err, took = call(client(h, false), h)
  T.eq(#h.sent, request_bytes + 9, "the ACK went out once room came")
  ended_at_the_deadline(err, took)
end)
