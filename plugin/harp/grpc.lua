-- gRPC unary call over HTTP/2 (prior knowledge, no TLS) on a Unix socket, with lua-http 0.4.
--   call(socket_path, method_path, request_bytes, timeout_s) -> response_bytes | nil, err
-- One persistent connection lives in this module; it is dropped on any error. A call that fails on a
-- REUSED connection (transport error) is retried once on a fresh one within the same deadline.
-- Only the HTTP/2 pieces of lua-http are loaded: http.client pulls in lpeg grammars (~60 ms per reload).

local cqueues = require "cqueues"
local cs = require "cqueues.socket"
local h2_connection = require "http.h2_connection"
local new_headers = require "http.headers".new
local onerror = require "http.connection_common".onerror

local monotime = cqueues.monotime
local byte, char, sub, format, floor = string.byte, string.char, string.sub, string.format, math.floor
local concat, pcall, tostring, tonumber = table.concat, pcall, tostring, tonumber

local M = {}
M.MAX_RESPONSE = 1048576 -- bytes; a Decision is a few hundred
M.precheck = true -- look for GOAWAY/EOF on an idle connection before reusing it (tests turn it off)
M.stats = {calls = 0, connects = 0, retries = 0}

local conn, conn_path -- the persistent connection and the socket it talks to

local function drop()
  local c = conn
  conn, conn_path = nil, nil
  if c then pcall(c.close, c) end
end
M.close = drop

-- lua-http 0.4 validates every HEADERS block of a response as if it were the first, so gRPC trailers
-- (no :status, upstream issue #236) are a protocol error. A block without :status that carries
-- grpc-status is a trailer (or a malformed trailers-only response, judged later by its grpc-status
-- anyway): give it a synthetic :status first, where the validator wants pseudo-headers.
local function accept_trailers(c)
  local ctx = c.decoding_context
  local decode = ctx.decode_headers
  ctx.decode_headers = function(self, payload, header_list, pos)
    local headers, newpos, errno = decode(self, payload, header_list, pos)
    if headers and not headers:has(":status") and headers:has("grpc-status") then
      local fixed = new_headers()
      fixed:append(":status", "200")
      for name, value, never_index in headers:each() do
        fixed:append(name, value, never_index)
      end
      headers = fixed
    end
    return headers, newpos, errno
  end
end

local function remaining(deadline)
  return deadline - monotime()
end

local TIMEOUT = "deadline exceeded"

local function connect_raw(path, deadline)
  local sock, err = cs.connect {path = path}
  if not sock then return nil, "socket: " .. tostring(err) end
  sock:onerror(onerror) -- return errors instead of raising them
  local left = remaining(deadline)
  if left <= 0 then pcall(sock.close, sock); return nil, TIMEOUT end
  local ok, cerr = sock:connect(left)
  if not ok then
    pcall(sock.close, sock)
    return nil, "connect " .. path .. ": " .. tostring(cerr)
  end
  M.stats.connects = M.stats.connects + 1
  local okn, c = pcall(h2_connection.new, sock, "client")
  if not okn or not c then
    pcall(sock.close, sock)
    return nil, "http2 setup: " .. tostring(c)
  end
  accept_trailers(c)
  -- Outside a cqueues controller lua-http waits with cqueues.poll(cond, conn), which registers the
  -- socket for the events of its last blocked operation; a write clears them, and a wait that then
  -- starts after a read had hit EAGAIN never wakes up. A client only ever waits for the server.
  c.events = function() return "r" end
  return c
end

local function connect(path, deadline)
  local ok, c, err = pcall(connect_raw, path, deadline)
  if not ok then return nil, "connect " .. path .. ": " .. tostring(c) end
  return c, err
end

-- Process frames that arrived while idle (GOAWAY, PING, SETTINGS); report whether the connection
-- still looks usable, so a server restart costs a reconnect rather than a failed attempt.
local function still_usable(c)
  for _ = 1, 16 do
    if c.recv_goaway_lowest or c.socket:eof("r") then return false end
    if not c:step(0) then return false end
    if c.had_eagain then
      c.had_eagain = false -- let the next wait start with a non-blocking read
      return not (c.recv_goaway_lowest or c.socket:eof("r"))
    end
  end
  return true
end

local function frame(msg)
  local n = #msg
  return "\0" .. char(floor(n / 16777216) % 256, floor(n / 65536) % 256, floor(n / 256) % 256, n % 256) .. msg
end

local function unframe(body)
  if #body < 5 then return nil, "short gRPC response (" .. #body .. " bytes)" end
  local flag, a, b, c, d = byte(body, 1, 5)
  if flag ~= 0 then return nil, "compressed or unknown gRPC frame flag " .. flag end
  local n = ((a * 256 + b) * 256 + c) * 256 + d
  if n ~= #body - 5 then return nil, format("gRPC frame length %d, body has %d", n, #body - 5) end
  return sub(body, 6)
end

local function status_error(h)
  local code = h:get("grpc-status")
  if code == "0" then return nil end
  return format("grpc-status %s: %s", tostring(code), tostring(h:get("grpc-message") or ""))
end

-- One attempt. Returns response bytes, or nil, err, transport (true when the connection failed,
-- as opposed to the server answering with an error).
local function attempt(c, method, payload, deadline)
  local stream = c:new_stream()
  local h = new_headers()
  h:append(":method", "POST")
  h:append(":scheme", "http")
  h:append(":authority", "localhost")
  h:append(":path", method)
  h:append("content-type", "application/grpc")
  h:append("te", "trailers")
  h:append("grpc-timeout", format("%dm", floor(remaining(deadline) * 1000) + 1))

  local left = remaining(deadline)
  if left <= 0 then return nil, TIMEOUT, true end
  local ok, err = stream:write_headers(h, false, left)
  if not ok then return nil, "send headers: " .. tostring(err), true end
  left = remaining(deadline)
  if left <= 0 then return nil, TIMEOUT, true end
  ok, err = stream:write_chunk(frame(payload), true, left)
  if not ok then return nil, "send body: " .. tostring(err), true end

  left = remaining(deadline)
  if left <= 0 then return nil, TIMEOUT, true end
  local rh
  rh, err = stream:get_headers(left)
  if not rh then return nil, "response headers: " .. tostring(err or "stream closed"), true end
  if rh:get(":status") ~= "200" then return nil, "HTTP status " .. tostring(rh:get(":status")), false end
  if rh:has("grpc-status") then -- trailers-only response: an error (or an empty OK without a message)
    return nil, status_error(rh) or "OK without a response message", false
  end

  local parts, size = {}, 0
  while true do
    left = remaining(deadline)
    if left <= 0 then return nil, TIMEOUT, true end
    local chunk, cerr = stream:get_next_chunk(left)
    if chunk == nil then
      if cerr ~= nil then return nil, "response body: " .. tostring(cerr), true end
      break
    end
    size = size + #chunk
    if size > M.MAX_RESPONSE then return nil, "response larger than " .. M.MAX_RESPONSE .. " bytes", false end
    parts[#parts + 1] = chunk
  end

  left = remaining(deadline)
  if left <= 0 then return nil, TIMEOUT, true end
  local trailers
  trailers, err = stream:get_headers(left)
  if not trailers then return nil, "no trailers: " .. tostring(err or "stream closed"), true end
  local serr = status_error(trailers)
  if serr then return nil, serr, false end
  return unframe(concat(parts))
end

local function guarded_attempt(c, method, payload, deadline)
  local ok, res, err, transport = pcall(attempt, c, method, payload, deadline)
  if not ok then return nil, "gRPC call raised: " .. tostring(res), true end
  return res, err, transport
end

function M.call(path, method, payload, timeout_s)
  local deadline = monotime() + (tonumber(timeout_s) or 0.05)
  M.stats.calls = M.stats.calls + 1
  local reused = false
  if conn and conn_path == path then
    local ok, usable = true, true
    if M.precheck then ok, usable = pcall(still_usable, conn) end
    if ok and usable then reused = true else drop() end
  elseif conn then
    drop()
  end
  if not reused then
    local c, err = connect(path, deadline)
    if not c then return nil, err end
    conn, conn_path = c, path
  end

  local res, err, transport = guarded_attempt(conn, method, payload, deadline)
  if res then return res end
  drop()
  if not (reused and transport) or remaining(deadline) <= 0 then return nil, err end

  -- exactly one retry, only because the failed connection had been reused
  M.stats.retries = M.stats.retries + 1
  local c, cerr = connect(path, deadline)
  if not c then return nil, err .. "; reconnect: " .. tostring(cerr) end
  conn, conn_path = c, path
  res, err = guarded_attempt(c, method, payload, deadline)
  if res then return res end
  drop()
  return nil, "after retry: " .. tostring(err)
end

-- For tests: is a connection being kept?
function M.connected()
  return conn ~= nil
end

return M
