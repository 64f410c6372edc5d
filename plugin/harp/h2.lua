-- A lean HTTP/2 client connection (RFC 9113, prior knowledge, no TLS) on a Unix socket, for one
-- request at a time: what a unary gRPC call needs, and no more.
--   conn = h2.connect(path, deadline)             -> conn | nil, err
--   conn:request(header_block, body, deadline, max_body)
--       -> {headers = {...}, trailers = {...} | nil, body = "..."} | nil, err, transport
--   conn:usable()                                  -> false once the server said GOAWAY or hung up
--   conn:close()
-- luasocket does the I/O (a blocking socket, every wait bounded by the caller's deadline);
-- lua-http's http.hpack decodes the response header blocks (Huffman, dynamic table: one decoding
-- context per connection). Requests go out as prepared HPACK blocks (static-table indices and
-- literals without indexing: no encoder state). Frames the server sends to a connection while it
-- sits idle (SETTINGS, PING, WINDOW_UPDATE, GOAWAY) are read on its next use.
-- Deadlines are seconds on harp.clock's monotonic clock. Nothing here raises on bad input from the
-- server, but callers still run it under pcall.

local unix = require "socket.unix"
local hpack = require "http.hpack"
local now = require "harp.clock".now

local byte, char, sub, format, floor, min = string.byte, string.char, string.sub, string.format, math.floor, math.min
local concat, setmetatable, tostring, tonumber, pcall, type = table.concat, setmetatable, tostring, tonumber, pcall,
  type

local M = {}

-- A write to a server that has hung up raises SIGPIPE, whose default action ends the process, and
-- luasocket's send has no MSG_NOSIGNAL. slurmctld blocks SIGPIPE in all its threads (checked on
-- 22.05), so there the write just fails (EPIPE) and nothing is changed. Where the calling thread
-- neither blocks nor ignores it (a standalone Lua: the tests' driver), it is ignored, with lua-posix.
local function sigpipe_state()
  local f = io.open("/proc/thread-self/status", "r") or io.open("/proc/self/status", "r")
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
    return "ignored by harp.h2"
  end
  return "delivered" -- a write to a closed connection would end this process
end
M.sigpipe = sigpipe_state()
-- Our receive window, per stream (SETTINGS_INITIAL_WINDOW_SIZE) and for the connection (never
-- below HTTP/2's 65,535). Larger than any response we accept: a call needs no WINDOW_UPDATE.
-- Read at connect time; the tests lower it to make window top-ups happen.
M.WINDOW = 16777216
M.MAX_HEADER_BLOCK = 65536 -- bytes of one response header block (HEADERS + CONTINUATION), at most

local MAX_FRAME = 16384 -- our SETTINGS_MAX_FRAME_SIZE: the default, never changed
local MAX_WINDOW = 2147483647
local DEFAULT_WINDOW = 65535
local PREFACE = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

local DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION =
  0, 1, 3, 4, 5, 6, 7, 8, 9
local END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 1, 1, 4, 8, 32
local REFUSED_STREAM = 7

local ERROR_NAMES = {[0] = "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
  "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
  "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"}
local function error_name(code)
  return ERROR_NAMES[code] or format("error code %d", code)
end
M.error_name = error_name

local function has(flags, bit)
  return floor(flags / bit) % 2 == 1
end

local function u32(n)
  return char(floor(n / 16777216) % 256, floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
end

local function get_u32(s, i)
  local a, b, c, d = byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function get_u31(s, i) -- a stream id or window increment: the reserved top bit is ignored
  local a, b, c, d = byte(s, i, i + 3)
  return (((a % 128) * 256 + b) * 256 + c) * 256 + d
end

local function frame(ftype, flags, sid, payload)
  local n = #payload
  return char(floor(n / 65536) % 256, floor(n / 256) % 256, n % 256, ftype, flags) .. u32(sid) .. payload
end
M.frame = frame

local SETTINGS_ACK = frame(SETTINGS, ACK, 0, "")

-- Header blocks decode into a plain table name -> value (the first value of a repeated name).
local collector_methods = {}
function collector_methods:append(name, value)
  local fields = self.fields
  if fields[name] == nil then fields[name] = value end
  self.n = self.n + 1
end
function collector_methods:len()
  return self.n
end
local collector_mt = {__index = collector_methods}

local Conn = {}
Conn.__index = Conn

local function queue(c, data)
  local n = c.nout + 1
  c.out[n] = data
  c.nout = n
end

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
  local left = deadline and deadline - now() or 0
  c.sock:settimeout(left > 0 and left or 0, "t")
  local sent, err = c.sock:send(data)
  if not sent then
    c.dead = "send: " .. tostring(err)
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
local function fill(c, n, deadline)
  local buf = c.buf
  local sock = c.sock
  while #buf < n do
    local left = 0
    if deadline then
      left = deadline - now()
      if left < 0 then left = 0 end
      if c.nout > 0 and not sock:dirty() then
        local ok, err = flush(c, deadline)
        if not ok then
          c.buf = buf
          return nil, err
        end
      end
    end
    sock:settimeout(left, "t")
    local data, err, partial = sock:receive(n - #buf)
    if data then
      buf = buf == "" and data or buf .. data
    else
      if partial and partial ~= "" then buf = buf .. partial end
      c.buf = buf
      return nil, err
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

local function decode_block(c, block)
  local h = setmetatable({n = 0, fields = {}}, collector_mt)
  local res, pos = c.hpack:decode_headers(block, h)
  if not res then return nil, "COMPRESSION_ERROR: " .. (tostring(pos):match("^[^\n]*")) end
  if pos ~= #block + 1 then return nil, "COMPRESSION_ERROR: truncated header block" end
  return h.fields
end

local function closed_or_idle(c, s, sid, what)
  if sid % 2 == 0 or sid >= c.next_id then
    return nil, format("PROTOCOL_ERROR: %s on stream %d, which the client never opened", what, sid)
  end
  if s and sid > s.id then return nil, format("PROTOCOL_ERROR: %s on idle stream %d", what, sid) end
  return true -- a stream that is over (a call we gave up on): ignored
end

local function on_header_block(c, s, sid, flags, block)
  local fields, err = decode_block(c, block) -- every block, whatever its stream: the table stays in step
  if not fields then return nil, err end
  if not s or sid ~= s.id then return closed_or_idle(c, s, sid, "HEADERS") end
  if s.done or s.trailers then return nil, "PROTOCOL_ERROR: HEADERS after the end of the stream" end
  local ends = has(flags, END_STREAM)
  if not s.headers then
    s.headers = fields
    if ends then s.trailers, s.done = fields, true end -- a trailers-only response
  elseif not ends then
    return nil, "PROTOCOL_ERROR: a second header block without END_STREAM"
  else
    s.trailers, s.done = fields, true
  end
  return true
end

-- Receive windows (ours): `left` is what the server may still send as of the WINDOW_UPDATEs already
-- sent, `unacked` what we took in and have not given back yet, `queued` what a WINDOW_UPDATE waiting
-- in c.out gives back (counted in `left` once written). Half a window taken in: give it back.
local function consume(w, len, window, sid, c)
  w.left = w.left - len
  if w.left < 0 then return false end
  local unacked = w.unacked + len
  if unacked >= window / 2 then
    queue(c, frame(WINDOW_UPDATE, 0, sid, u32(unacked)))
    w.queued, unacked = w.queued + unacked, 0
  end
  w.unacked = unacked
  return true
end

local function on_data(c, s, flags, sid, payload)
  if sid == 0 then return nil, "PROTOCOL_ERROR: DATA on stream 0" end
  local len = #payload
  if not consume(c.recv, len, c.conn_window, 0, c) then
    return nil, "FLOW_CONTROL_ERROR: the server overran the connection window"
  end
  if not s or sid ~= s.id then return closed_or_idle(c, s, sid, "DATA") end
  if not s.headers or s.trailers or s.done then return nil, "PROTOCOL_ERROR: DATA outside the response body" end
  local ends = has(flags, END_STREAM)
  if ends then -- no more DATA on this stream: nothing to give back
    s.recv.left = s.recv.left - len
    if s.recv.left < 0 then return nil, "FLOW_CONTROL_ERROR: the server overran the stream window" end
  elseif not consume(s.recv, len, c.stream_window, sid, c) then
    return nil, "FLOW_CONTROL_ERROR: the server overran the stream window"
  end
  if has(flags, PADDED) then
    local pad = byte(payload, 1)
    if not pad or pad >= len then return nil, "PROTOCOL_ERROR: bad DATA padding" end
    payload = sub(payload, 2, len - pad)
  end
  if payload ~= "" then
    local size = s.size + #payload
    if size > s.max_body then
      s.too_big, s.done = true, true
      return true
    end
    s.size = size
    s.parts[#s.parts + 1] = payload
  end
  if ends then s.done = true end -- no trailers: judged by the caller
  return true
end

local function on_headers(c, s, flags, sid, payload)
  if sid == 0 then return nil, "PROTOCOL_ERROR: HEADERS on stream 0" end
  local first, last = 1, #payload
  if has(flags, PADDED) then
    local pad = byte(payload, 1)
    if not pad then return nil, "PROTOCOL_ERROR: bad HEADERS padding" end
    first, last = 2, last - pad
  end
  if has(flags, PRIORITY_FLAG) then first = first + 5 end
  if first > last + 1 then return nil, "PROTOCOL_ERROR: bad HEADERS padding or priority" end
  local block = sub(payload, first, last)
  if not has(flags, END_HEADERS) then
    c.cont, c.cont_sid, c.cont_flags, c.cont_size = {block}, sid, flags, #block
    return true
  end
  return on_header_block(c, s, sid, flags, block)
end

local function on_continuation(c, s, flags, sid, payload)
  if sid ~= c.cont_sid then return nil, "PROTOCOL_ERROR: CONTINUATION of another stream" end
  local size = c.cont_size + #payload
  if size > M.MAX_HEADER_BLOCK then return nil, "response header block over " .. M.MAX_HEADER_BLOCK .. " bytes" end
  local parts = c.cont
  parts[#parts + 1] = payload
  c.cont_size = size
  if not has(flags, END_HEADERS) then return true end
  c.cont = nil
  return on_header_block(c, s, sid, c.cont_flags, concat(parts))
end

local function on_settings(c, s, flags, sid, payload)
  if sid ~= 0 then return nil, "PROTOCOL_ERROR: SETTINGS on a stream" end
  if has(flags, ACK) then
    if payload ~= "" then return nil, "FRAME_SIZE_ERROR: SETTINGS ACK with a payload" end
    return true
  end
  if #payload % 6 ~= 0 then return nil, "FRAME_SIZE_ERROR: SETTINGS of " .. #payload .. " bytes" end
  for i = 1, #payload, 6 do
    local id = byte(payload, i) * 256 + byte(payload, i + 1)
    local value = get_u32(payload, i + 2)
    if id == 4 then -- INITIAL_WINDOW_SIZE: our send window on each stream
      if value > MAX_WINDOW then return nil, "FLOW_CONTROL_ERROR: INITIAL_WINDOW_SIZE " .. value end
      if s then s.send_window = s.send_window + value - c.peer_window end
      c.peer_window = value
    elseif id == 5 then -- MAX_FRAME_SIZE
      if value < 16384 or value > 16777215 then return nil, "PROTOCOL_ERROR: MAX_FRAME_SIZE " .. value end
      c.peer_max_frame = value
    end -- HEADER_TABLE_SIZE: our blocks use no dynamic table; the others do not concern one call at a time
  end
  queue(c, SETTINGS_ACK)
  return true
end

local function on_goaway(c, s, sid, payload)
  if sid ~= 0 or #payload < 8 then return nil, "PROTOCOL_ERROR: malformed GOAWAY" end
  local last, code = get_u31(payload, 1), get_u32(payload, 5)
  if not c.goaway or last < c.goaway then c.goaway = last end
  c.goaway_reason = error_name(code) .. (#payload > 8 and (" " .. sub(payload, 9, 200)) or "")
  if s and s.id > last and not s.done then s.refused, s.done = true, true end
  return true
end

local function on_window_update(c, s, sid, payload)
  if #payload ~= 4 then return nil, "FRAME_SIZE_ERROR: WINDOW_UPDATE of " .. #payload .. " bytes" end
  local inc = get_u31(payload, 1)
  if inc == 0 then return nil, "PROTOCOL_ERROR: WINDOW_UPDATE of 0" end
  if sid == 0 then
    c.send_window = c.send_window + inc
    if c.send_window > MAX_WINDOW then return nil, "FLOW_CONTROL_ERROR: connection window over 2^31-1" end
  elseif s and sid == s.id then
    s.send_window = s.send_window + inc
    if s.send_window > MAX_WINDOW then return nil, "FLOW_CONTROL_ERROR: stream window over 2^31-1" end
  end
  return true
end

-- One frame from the server: true, or nil, err for a connection error. s: the stream in flight (or nil).
local function on_frame(c, s, ftype, flags, sid, payload)
  if c.cont then
    if ftype ~= CONTINUATION then return nil, "PROTOCOL_ERROR: a header block cut by another frame" end
    return on_continuation(c, s, flags, sid, payload)
  end
  if not c.got_settings then
    if ftype ~= SETTINGS or has(flags, ACK) then
      return nil, "PROTOCOL_ERROR: the server's first frame is not SETTINGS (not an HTTP/2 server?)"
    end
    c.got_settings = true
  end
  if ftype == DATA then return on_data(c, s, flags, sid, payload) end
  if ftype == HEADERS then return on_headers(c, s, flags, sid, payload) end
  if ftype == SETTINGS then return on_settings(c, s, flags, sid, payload) end
  if ftype == WINDOW_UPDATE then return on_window_update(c, s, sid, payload) end
  if ftype == PING then
    if sid ~= 0 or #payload ~= 8 then return nil, "PROTOCOL_ERROR: malformed PING" end
    if not has(flags, ACK) then queue(c, frame(PING, ACK, 0, payload)) end
    return true
  end
  if ftype == GOAWAY then return on_goaway(c, s, sid, payload) end
  if ftype == RST_STREAM then
    if sid == 0 or #payload ~= 4 then return nil, "PROTOCOL_ERROR: malformed RST_STREAM" end
    if s and sid == s.id then s.reset, s.done = get_u32(payload, 1), true end
    return true
  end
  if ftype == PUSH_PROMISE then return nil, "PROTOCOL_ERROR: PUSH_PROMISE, push is disabled" end
  if ftype == CONTINUATION then return nil, "PROTOCOL_ERROR: CONTINUATION without HEADERS" end
  return true -- PRIORITY and unknown frame types are ignored
end

-- Read and handle one frame. -> true | nil, err (the connection is then unusable)
local function step(c, s, deadline)
  local ftype, flags, sid, payload = read_frame(c, deadline)
  if not ftype then
    local err = flags
    if err == "timeout" then return nil, "deadline exceeded" end
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
  return true
end

-- Handle what the server sent while the connection sat idle (without waiting);
-- false if it should not take another request.
function Conn:usable()
  if self.dead or self.goaway or self.next_id > MAX_WINDOW then return false end
  for _ = 1, 64 do
    local ftype, flags, sid, payload = read_frame(self, nil)
    if not ftype then return flags == "timeout" end
    if not on_frame(self, nil, ftype, flags, sid, payload) then return false end
    if self.goaway then return false end
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
  if s.too_big then return nil, "response larger than " .. max_body .. " bytes", false end
  return {headers = s.headers, trailers = s.trailers, body = concat(s.parts)}
end

-- Connect; the preface and our SETTINGS go out with the first request (one write).
function M.connect(path, deadline)
  local sock, err = unix()
  if not sock then return nil, "socket: " .. tostring(err) end
  local left = deadline - now()
  if left <= 0 then
    sock:close()
    return nil, "deadline exceeded"
  end
  sock:settimeout(left, "t")
  local ok, cerr = sock:connect(path)
  if not ok then
    sock:close()
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
