-- Unary gRPC over HTTP/2 (prior knowledge, no TLS) on a Unix socket, with harp.h2.
--   call(socket_path, method_path, request_bytes, timeout_s[, max_response]) -> response_bytes | nil, err
--   (max_response: the largest response message taken, in bytes; M.MAX_RESPONSE by default)
-- One persistent connection lives in this module; it is dropped on any error. A call that fails on a
-- REUSED connection (transport error) is retried once on a fresh one within the same deadline; one
-- that ran out of time is not.
-- Loads luasocket, lua-http's HPACK module (not the rest of lua-http) and lua-posix's clock and poll.

local h2 = require "harp.h2"
local hpack = require "http.hpack"
local now = require "harp.clock".now

local byte, char, sub, format, floor, gsub = string.byte, string.char, string.sub, string.format, math.floor,
  string.gsub
local concat, pcall, tostring, tonumber = table.concat, pcall, tostring, tonumber

local M = {}
M.MAX_RESPONSE = 1048576 -- bytes, unless the caller says (harp.main takes a Decision of 16 KiB at most)
M.precheck = true -- look for GOAWAY/EOF on an idle connection before reusing it (tests turn it off)
M.stats = {calls = 0, connects = 0, retries = 0}
M.h2 = h2
-- Said once by harp.main: the socket's waits are not on the monotonic clock (no lua-posix poll).
if not h2.wait.polls then M.degraded = "socket waits use " .. h2.wait.source end

local conn, conn_path -- the persistent connection and the socket it talks to

local function drop()
  local c = conn
  conn, conn_path = nil, nil
  if c then pcall(c.close, c) end
end
M.close = drop

local TIMEOUT = h2.TIMEOUT

-- Request headers as an HPACK block: static-table entries and literals without indexing, so the
-- server's decoder state never depends on ours. Everything but grpc-timeout is fixed per method.
local blocks = {}
local function header_block(method, seconds)
  local fixed = blocks[method]
  if not fixed then
    fixed = concat {
      hpack.encode_indexed_header(3), -- :method POST
      hpack.encode_indexed_header(6), -- :scheme http
      hpack.encode_literal_header_none(4, method), -- :path
      hpack.encode_literal_header_none(1, "localhost"), -- :authority
      hpack.encode_literal_header_none(31, "application/grpc"), -- content-type
      hpack.encode_literal_header_none_new("te", "trailers"),
      hpack.encode_literal_header_none(58, "slurm-harp-plugin"), -- user-agent
    }
    blocks[method] = fixed
  end
  local ms = floor(seconds * 1000) + 1
  if ms > 99999999 then ms = 99999999 end -- at most 8 digits
  local value = ms .. "m"
  return fixed .. "\0\12grpc-timeout" .. char(#value) .. value
end

local function frame(msg)
  local n = #msg
  return "\0" .. char(floor(n / 16777216) % 256, floor(n / 65536) % 256, floor(n / 256) % 256, n % 256) .. msg
end

local function unframe(body, max)
  if #body < 5 then return nil, "short gRPC response (" .. #body .. " bytes)" end
  local flag, a, b, c, d = byte(body, 1, 5)
  if flag ~= 0 then return nil, "compressed or unknown gRPC frame flag " .. flag end
  local n = ((a * 256 + b) * 256 + c) * 256 + d
  if n > max then return nil, "response larger than " .. max .. " bytes" end
  if n ~= #body - 5 then return nil, format("gRPC frame length %d, body has %d", n, #body - 5) end
  return sub(body, 6)
end

local function unpercent(s)
  return (gsub(s, "%%(%x%x)", function(hex) return char(tonumber(hex, 16)) end))
end

local function status_error(t)
  local code = t["grpc-status"]
  if code == "0" then return nil end
  if code == nil then return "no grpc-status in the response" end
  return format("grpc-status %s: %s", code, unpercent(t["grpc-message"] or ""))
end

-- One attempt. Returns response bytes, or nil, err, transport (true when the connection failed,
-- as opposed to the server answering with an error).
local function attempt(c, method, payload, deadline, max)
  local left = deadline - now()
  if left <= 0 then return nil, TIMEOUT, true end
  local resp, err, transport = c:request(header_block(method, left), frame(payload), deadline, max + 5)
  if not resp then
    if err == h2.TOO_BIG then err = "response larger than " .. max .. " bytes" end
    return nil, err, transport
  end
  local h, t = resp.headers, resp.trailers
  if h[":status"] ~= "200" then return nil, "HTTP status " .. tostring(h[":status"]), false end
  local ct = h["content-type"]
  if ct and sub(ct, 1, 16) ~= "application/grpc" then return nil, "content-type " .. ct .. " is not gRPC", false end
  if not t then return nil, "response without trailers (no grpc-status)", false end
  local serr = status_error(t)
  if serr then return nil, serr, false end
  if t == h then return nil, "OK without a response message", false end -- trailers-only
  return unframe(resp.body, max)
end

local function guarded_attempt(c, method, payload, deadline, max)
  local ok, res, err, transport = pcall(attempt, c, method, payload, deadline, max)
  if not ok then return nil, "gRPC call raised: " .. tostring(res), true end
  return res, err, transport
end

local function connect(path, deadline)
  local ok, c, err = pcall(h2.connect, path, deadline)
  if not ok then return nil, "connect " .. tostring(path) .. ": " .. tostring(c) end
  if c then M.stats.connects = M.stats.connects + 1 end
  return c, err
end

function M.call(path, method, payload, timeout_s, max_response)
  local deadline = now() + (tonumber(timeout_s) or 0.05)
  local max = tonumber(max_response) or M.MAX_RESPONSE
  M.stats.calls = M.stats.calls + 1
  local reused = false
  if conn and conn_path == path then
    local ok, usable = true, true
    if M.precheck then ok, usable = pcall(conn.usable, conn) end
    if ok and usable then reused = true else drop() end
  elseif conn then
    drop()
  end
  if not reused then
    local c, err = connect(path, deadline)
    if not c then return nil, err end
    conn, conn_path = c, path
  end

  local res, err, transport = guarded_attempt(conn, method, payload, deadline, max)
  if res then return res end
  drop()
  -- a retry is for a reused connection the server had closed, not for a call out of time (a wait
  -- may end up to a millisecond before the deadline: poll(2) waits in whole milliseconds)
  if err == TIMEOUT or not (reused and transport) or deadline - now() <= 0 then return nil, err end

  -- exactly one retry, only because the failed connection had been reused
  M.stats.retries = M.stats.retries + 1
  local c, cerr = connect(path, deadline)
  if not c then return nil, err .. "; reconnect: " .. tostring(cerr) end
  conn, conn_path = c, path
  res, err = guarded_attempt(c, method, payload, deadline, max)
  if res then return res end
  drop()
  return nil, "after retry: " .. tostring(err)
end

-- For tests: is a connection being kept?
function M.connected()
  return conn ~= nil
end

return M
