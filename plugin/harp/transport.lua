-- The gRPC transport (harp.grpc) when its Lua libraries are installed; its absence is an answer,
-- not an error: callers then pass every job (job_submit) or print nothing (cli_filter).

local pcall, require, tostring = pcall, require, tostring

local M = {}

-- harp.grpc | nil, why
function M.load()
  local ok, mod = pcall(require, "harp.grpc")
  if ok then return mod end
  return nil, "gRPC transport unavailable (lua-socket/lua-http/lua-posix missing?): " .. tostring(mod)
end

return M
