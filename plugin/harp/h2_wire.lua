-- HTTP/2 on the wire (RFC 9113), for harp.h2 and harp.h2_frames: frame types, flags, error codes,
-- limits, and frames to and from bytes. Nothing here keeps state.

local byte, char, floor, format = string.byte, string.char, math.floor, string.format

local W = {}

W.MAX_FRAME = 16384 -- our SETTINGS_MAX_FRAME_SIZE: the default, never changed
W.MAX_WINDOW = 2147483647
W.DEFAULT_WINDOW = 65535
W.PREFACE = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

W.DATA, W.HEADERS, W.RST_STREAM, W.SETTINGS, W.PUSH_PROMISE, W.PING, W.GOAWAY, W.WINDOW_UPDATE,
  W.CONTINUATION = 0, 1, 3, 4, 5, 6, 7, 8, 9
W.END_STREAM, W.ACK, W.END_HEADERS, W.PADDED, W.PRIORITY_FLAG = 1, 1, 4, 8, 32
W.REFUSED_STREAM = 7

local ERROR_NAMES = {[0] = "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
  "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
  "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"}
function W.error_name(code)
  return ERROR_NAMES[code] or format("error code %d", code)
end

function W.has(flags, bit)
  return floor(flags / bit) % 2 == 1
end

local function u32(n)
  return char(floor(n / 16777216) % 256, floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
end
W.u32 = u32

function W.get_u32(s, i)
  local a, b, c, d = byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

function W.get_u31(s, i) -- a stream id or window increment: the reserved top bit is ignored
  local a, b, c, d = byte(s, i, i + 3)
  return (((a % 128) * 256 + b) * 256 + c) * 256 + d
end

function W.frame(ftype, flags, sid, payload)
  local n = #payload
  return char(floor(n / 65536) % 256, floor(n / 256) % 256, n % 256, ftype, flags) .. u32(sid) .. payload
end

-- Queue bytes for the connection's next write (harp.h2 writes them all at once).
function W.queue(c, data)
  local n = c.nout + 1
  c.out[n] = data
  c.nout = n
end

return W
