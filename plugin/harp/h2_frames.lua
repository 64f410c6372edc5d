-- What harp.h2's client does with each frame the server sends: header blocks (HPACK-decoded with
-- lua-http's http.hpack, one decoding context per connection), the response body and its flow
-- control, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, RST_STREAM; anything that breaks RFC 9113 is a
-- connection error. c: the connection (harp.h2), s: the stream in flight (or nil). Frames the
-- client owes the server (ACKs, WINDOW_UPDATE) are queued on c for its next write.

local wire = require "harp.h2_wire"

local byte, sub, format = string.byte, string.sub, string.format
local concat, setmetatable, tostring = table.concat, setmetatable, tostring
local has, u32, get_u32, get_u31, frame, queue = wire.has, wire.u32, wire.get_u32, wire.get_u31, wire.frame,
  wire.queue
local error_name = wire.error_name
local DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION =
  wire.DATA, wire.HEADERS, wire.RST_STREAM, wire.SETTINGS, wire.PUSH_PROMISE, wire.PING, wire.GOAWAY,
  wire.WINDOW_UPDATE, wire.CONTINUATION
local END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG =
  wire.END_STREAM, wire.ACK, wire.END_HEADERS, wire.PADDED, wire.PRIORITY_FLAG
local MAX_WINDOW = wire.MAX_WINDOW

local F = {}
-- Bytes of one response header block (HEADERS + CONTINUATION), at most. A block is decoded in one go,
-- with no look at the clock: 16 KiB of short Huffman literals took 12-18 ms, 4 KiB some 3 ms. The
-- daemon's blocks are about a hundred bytes. Each CONTINUATION counts at least F.MIN_PART bytes: an
-- endless run of empty ones kept growing the parts to join.
F.MAX_HEADER_BLOCK = 4096
F.MIN_PART = 64

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
  if #block > F.MAX_HEADER_BLOCK then return nil, "response header block over " .. F.MAX_HEADER_BLOCK .. " bytes" end
  if not has(flags, END_HEADERS) then
    c.cont, c.cont_sid, c.cont_flags, c.cont_size = {block}, sid, flags, #block
    return true
  end
  return on_header_block(c, s, sid, flags, block)
end

local function on_continuation(c, s, flags, sid, payload)
  if sid ~= c.cont_sid then return nil, "PROTOCOL_ERROR: CONTINUATION of another stream" end
  local size = c.cont_size + (#payload > F.MIN_PART and #payload or F.MIN_PART)
  if size > F.MAX_HEADER_BLOCK then return nil, "response header block over " .. F.MAX_HEADER_BLOCK .. " bytes" end
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
function F.on_frame(c, s, ftype, flags, sid, payload)
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

return F
