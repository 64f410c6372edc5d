-- The plugin's gRPC client (harp.grpc, one persistent connection per server) calling several
-- servers in turn, an idle gap before each call, for benchmarks/bench_transport.py.
--   lua5.1 alternate.lua PLUGIN_DIR CALLS GAP_MS SOCKET...
-- A SOCKET given as DIR=SOCKET is called by the plugin in DIR (another checkout's plugin/: two
-- versions of the client side by side, on one server or two).
-- Prints one line per server: the call times in microseconds, space-separated; errors to stderr.
local base_path = package.path
package.path = arg[1] .. "/?.lua;" .. base_path
local now = require "harp.clock".now
local nanosleep = require "posix.time".nanosleep

local calls, gap = tonumber(arg[2]), tonumber(arg[3]) / 1000
local METHOD = "/harp.v1.Predictor/Predict"
local sockets, clients, times = {}, {}, {}
for i = 4, #arg do
  local dir, path = arg[i]:match("^(.-)=(.+)$")
  sockets[#sockets + 1] = path or arg[i]
  for name in pairs(package.loaded) do -- a client (a connection) each, from its own plugin directory
    if name:sub(1, 5) == "harp." and name ~= "harp.clock" then package.loaded[name] = nil end
  end
  package.path = (dir or arg[1]) .. "/?.lua;" .. base_path
  clients[#clients + 1] = require "harp.grpc"
  times[#times + 1] = {}
end
local pause = {tv_sec = 0, tv_nsec = math.floor(gap * 1e9)}
for _ = 1, calls do
  for k = 1, #sockets do
    if gap > 0 then nanosleep(pause) end
    local t0 = now()
    local reply, err = clients[k].call(sockets[k], METHOD, "", 0.5) -- an empty SubmitRequest
    local t = times[k]
    t[#t + 1] = string.format("%d", (now() - t0) * 1e6)
    if not reply then io.stderr:write(sockets[k], ": ", tostring(err), "\n") end
  end
end
for k = 1, #sockets do print(table.concat(times[k], " ")) end
