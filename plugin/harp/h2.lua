-- A lean HTTP/2 client connection (RFC 9113, prior knowledge, no TLS) on a Unix socket, for one
-- request at a time: what a unary gRPC call needs, and no more.
--   conn = h2.connect(path, deadline)             -> conn | nil, err
--   conn:request(header_block, body, deadline, max_body)
--       -> {headers = {...}, trailers = {...} | nil, body = "..."} | nil, err, transport
--       (err is M.TOO_BIG when the body passed max_body bytes: the rest is not read)
--   conn:usable()                                  -> false once the server said GOAWAY or hung up
--   conn:close()
-- luasocket does the I/O; harp.wait does the waits, each bounded by the caller's deadline on
-- harp.clock (poll(2) with lua-posix; luasocket's own timeouts, on the wall clock, without);
-- lua-http's http.hpack decodes the response header blocks (Huffman, dynamic table: one decoding
-- context per connection). Requests go out as prepared HPACK blocks (static-table indices and
-- literals without indexing: no encoder state). Frames the server sends to a connection while it
-- sits idle (SETTINGS, PING, WINDOW_UPDATE, GOAWAY) are read on its next use.
-- Deadlines are seconds on harp.clock's monotonic clock. Nothing here raises on bad input from the
-- server, but callers still run it under pcall. Frames to and from bytes: harp.h2_wire; what each
-- frame from the server does to the connection: harp.h2_frames.

local unix = require "socket.unix"
local hpack = require "http.hpack"
local now = require "harp.clock".now
local wire = require "harp.h2_wire"
local frames = require "harp.h2_frames"
local wait = require "harp.wait"

local byte, sub, format, min = string.byte, string.sub, string.format, math.min
local concat, setmetatable, tostring = table.concat, setmetatable, tostring

local M = {}

-- what a write to a server that hung up does to this process: harp.sigpipe
M.sigpipe = require "harp.sigpipe".state
-- Our receive window, per stream (SETTINGS_INITIAL_WINDOW_SIZE) and for the connection (never
-- below HTTP/2's 65,535). Larger than any response we accept: a call needs no WINDOW_UPDATE.
-- Read at connect time; the tests lower it to make window top-ups happen.
M.WINDOW = 16777216
M.TOO_BIG = "response body too large"
M.TIMEOUT = "deadline exceeded"  -- grpc.lua never retries a call that failed so
M.wait = wait

local on_frame = frames.on_frame
local polls, ready, send = wait.polls, wait.ready, wait.send
local frame, u32, get_u31, queue, error_name = wire.frame, wire.u32, wire.get_u31, wire.queue, wire.error_name
local MAX_FRAME, MAX_WINDOW, DEFAULT_WINDOW, PREFACE = wire.MAX_FRAME, wire.MAX_WINDOW, wire.DEFAULT_WINDOW,
  wire.PREFACE
local DATA, HEADERS, SETTINGS, WINDOW_UPDATE, CONTINUATION = wire.DATA, wire.HEADERS, wire.SETTINGS,
  wire.WINDOW_UPDATE, wire.CONTINUATION
local END_STREAM, END_HEADERS, REFUSED_STREAM = wire.END_STREAM, wire.END_HEADERS, wire.REFUSED_STREAM

local Conn = {}
Conn.__index = Conn

function Conn:close()
  self.dead = self.dead or "closed"
  local sock = self.sock
  self.sock = nil
  if sock then sock:close() end
end

local function flush(c, deadline)
  if c.nout == 0 then return true end
  local data = concat(c.out, "", 1, c.nout)
  c.out, c.nout = {}, 0
  local sent, err = send(c.sock, data, deadline)
  if not sent then -- a server that reads nothing more holds the write until the deadline
    c.dead = err == "timeout" and M.TIMEOUT or ("send: " .. tostring(err))
    return nil, c.dead
  end
  local w = c.recv
  w.left, w.queued = w.left + w.queued, 0
  local s = c.stream
  if s then
    w = s.recv
    w.left, w.queued = w.left + w.queued, 0
  end
  return true
end

-- Make c.buf hold at least n bytes. deadline nil: take only what has already arrived.
-- Frames we owe the server (ACKs, WINDOW_UPDATE) go out before any wait.
-- Bytes the socket has already read (the rest of an answer, usually) are taken first without a
-- wait, so without reading the clock, which costs a microsecond or more in slurmctld. Once the clock
-- says the deadline has passed, nothing more is read, even bytes already waiting: "timeout".
-- With poll (harp.wait), the socket never waits in luasocket: its "timeout" is "not all there yet".
local function fill(c, n, deadline)
  local buf = c.buf
  local sock = c.sock
  while #buf < n do
    local left, dirty = 0, sock:dirty()
    local buffered = deadline and c.nout == 0 and dirty
    if deadline and not buffered then
      left = deadline - now()
      if left <= 0 then
        c.buf = buf
        return nil, "timeout"
      end
      local ok, err = true, nil
      if c.nout > 0 and not dirty then
        ok, err = flush(c, deadline)
        -- The write may have waited for room: the wait below gets the time then left, with poll as
        -- with luasocket's own timeouts (there the time before the write held a call to twice its
        -- deadline). None left is the deadline: a negative luasocket timeout would wait for ever.
        if ok then
          left = deadline - now()
          if left <= 0 then ok, err = nil, "timeout" end
        end
      end
      if ok and polls and not dirty then ok, err = ready(sock, deadline, left) end
      if not ok then
        c.buf = buf
        return nil, err
      end
    end
    if not polls then sock:settimeout(left, "t") end
    local data, err, partial = sock:receive(n - #buf)
    if data then
      buf = buf == "" and data or buf .. data
    else
      if partial and partial ~= "" then buf = buf .. partial end
      if not (err == "timeout" and (buffered or (polls and deadline))) then
        c.buf = buf
        return nil, err
      end
      -- what had been read was not enough: the next turn waits for the rest, within the deadline
    end
  end
  c.buf = buf
  return true
end

-- -> ftype, flags, stream id, payload | nil, err ("timeout": not (all) there yet; "closed"; other)
local function read_frame(c, deadline)
  local ok, err = fill(c, 9, deadline)
  if not ok then return nil, err end
  local buf = c.buf
  local l1, l2, l3, ftype, flags = byte(buf, 1, 5)
  local len = (l1 * 256 + l2) * 256 + l3
  if len > MAX_FRAME then
    return nil, format("FRAME_SIZE_ERROR: %d-byte frame (type %d) from the server", len, ftype)
  end
  ok, err = fill(c, 9 + len, deadline)
  if not ok then return nil, err end
  buf = c.buf
  local sid = get_u31(buf, 6)
  local payload = sub(buf, 10, 9 + len)
  c.buf = sub(buf, 10 + len)
  return ftype, flags, sid, payload
end

-- Read and handle one frame. -> true | nil, err (the connection is then unusable)
-- A server that keeps sending (frames of unknown types, PINGs, empty DATA, without end) keeps the
-- socket's buffer full, and a read of buffered bytes looks at no clock: so each frame handled spends
-- its payload's bytes and FRAME_COST from c.budget, and once that is spent the clock is read (and the
-- budget renewed). A call's answer (three frames, a few hundred bytes) never spends it: no clock read
-- on the normal path; a flood is cut within BUDGET bytes' work of the deadline.
local BUDGET, FRAME_COST = 16384, 64

-- What handling one frame spends of the budget: a header block is decoded (HPACK) where other
-- frames are only copied, so it costs four times its bytes.
local function spent(ftype, payload)
  local bytes = #payload
  if ftype == HEADERS or ftype == CONTINUATION then bytes = 4 * bytes end
  return bytes + FRAME_COST
end

local function step(c, s, deadline)
  local ftype, flags, sid, payload = read_frame(c, deadline)
  if not ftype then
    local err = flags
    if err == "timeout" then return nil, M.TIMEOUT end
    if err == "closed" then
      err = "connection closed by the server" .. (c.goaway_reason and (" (GOAWAY " .. c.goaway_reason .. ")") or "")
    end
    c.dead = err
    return nil, err
  end
  local ok, err = on_frame(c, s, ftype, flags, sid, payload)
  if not ok then
    c.dead = err
    return nil, err
  end
  local budget = c.budget - spent(ftype, payload)
  if budget < 0 then
    if not s.done and deadline - now() <= 0 then return nil, M.TIMEOUT end
    budget = BUDGET
  end
  c.budget = budget
  return true
end

-- Handle what the server sent while the connection sat idle (without waiting);
-- false if it should not take another request.
-- At most 64 frames or BUDGET bytes: the request reads the rest, within its deadline.
function Conn:usable()
  if self.dead or self.goaway or self.next_id > MAX_WINDOW then return false end
  local budget = BUDGET
  for _ = 1, 64 do
    local ftype, flags, sid, payload = read_frame(self, nil)
    if not ftype then return flags == "timeout" end
    if not on_frame(self, nil, ftype, flags, sid, payload) then return false end
    if self.goaway then return false end
    budget = budget - spent(ftype, payload)
    if budget < 0 then return true end
  end
  return true
end

-- One request and its whole response. transport (third result) is true when the connection failed
-- or the server refused the stream unprocessed: a fresh connection may succeed.
function Conn:request(block, body, deadline, max_body)
  if self.dead then return nil, self.dead, true end
  if self.goaway then return nil, "GOAWAY received (" .. tostring(self.goaway_reason) .. ")", true end
  local id = self.next_id
  if id > MAX_WINDOW then return nil, "stream ids used up", true end
  if #block > self.peer_max_frame then return nil, "request header block too large", false end
  self.next_id = id + 2
  self.budget = BUDGET
  local s = {id = id, send_window = self.peer_window, parts = {}, size = 0, max_body = max_body,
    recv = {left = self.stream_window, unacked = 0, queued = 0}}
  self.stream = s
  queue(self, frame(HEADERS, END_HEADERS, id, block))
  local pos, n = 1, #body
  while true do
    local rest = n - pos + 1
    local room = min(self.send_window, s.send_window, self.peer_max_frame)
    if rest > 0 and room <= 0 then -- wait for the server to open its windows
      local ok, err = step(self, s, deadline)
      if not ok then return nil, err, true end
      if s.done then break end -- it answered before taking the whole body
    else
      local k = min(room, rest)
      local last = pos + k > n
      queue(self, frame(DATA, last and END_STREAM or 0, id, sub(body, pos, pos + k - 1)))
      self.send_window, s.send_window, pos = self.send_window - k, s.send_window - k, pos + k
      if last then break end
    end
  end
  local ok, err = flush(self, deadline)
  if not ok then return nil, err, true end
  while not s.done do
    ok, err = step(self, s, deadline)
    if not ok then return nil, err, true end
  end
  self.stream = nil
  if s.refused then
    return nil, "GOAWAY before the request was processed (" .. tostring(self.goaway_reason) .. ")", true
  end
  if s.reset then return nil, "stream reset by the server: " .. error_name(s.reset), s.reset == REFUSED_STREAM end
  if s.too_big then return nil, M.TOO_BIG, false end
  return {headers = s.headers, trailers = s.trailers, body = concat(s.parts)}
end

-- Connect; the preface and our SETTINGS go out with the first request (one write).
function M.connect(path, deadline)
  local sock, err = unix()
  if not sock then return nil, "socket: " .. tostring(err) end
  local left = deadline - now()
  if left <= 0 then
    sock:close()
    return nil, M.TIMEOUT
  end
  if polls then sock:settimeout(0) else sock:settimeout(left, "t") end
  local ok, cerr = sock:connect(path)
  if not ok then
    sock:close()
    if polls and cerr == "timeout" then cerr = "its listen queue is full" end -- EAGAIN: no wait on Unix
    return nil, "connect " .. tostring(path) .. ": " .. tostring(cerr)
  end
  local window = M.WINDOW
  if window > MAX_WINDOW then window = MAX_WINDOW end
  local conn_window = window > DEFAULT_WINDOW and window or DEFAULT_WINDOW
  local c = setmetatable({
    sock = sock, buf = "", out = {}, nout = 0, hpack = hpack.new(4096), next_id = 1,
    send_window = DEFAULT_WINDOW, peer_window = DEFAULT_WINDOW, peer_max_frame = 16384,
    stream_window = window, conn_window = conn_window,
    recv = {left = DEFAULT_WINDOW, unacked = 0, queued = conn_window - DEFAULT_WINDOW},
  }, Conn)
  queue(c, PREFACE)
  queue(c, frame(SETTINGS, 0, 0, "\0\2" .. u32(0) .. "\0\4" .. u32(window))) -- ENABLE_PUSH 0, INITIAL_WINDOW_SIZE
  if conn_window > DEFAULT_WINDOW then queue(c, frame(WINDOW_UPDATE, 0, 0, u32(conn_window - DEFAULT_WINDOW))) end
  return c
end

return M
