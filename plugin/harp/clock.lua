-- A monotonic clock in seconds (a float): deadlines must not jump with the wall clock.
-- lua-posix's clock_gettime(CLOCK_MONOTONIC) first (a small C module, ~0.2 ms to load), then
-- cqueues.monotime, then os.time (whole seconds). Not luasocket's gettime: loading socket.core sets
-- SIGPIPE to SIG_IGN for the whole process, which slurmctld's children would inherit.

local pcall, require, type = pcall, require, type

local M = {}

local function posix_clock()
  local ok, ptime = pcall(require, "posix.time")
  if not ok or type(ptime) ~= "table" or not ptime.clock_gettime or not ptime.CLOCK_MONOTONIC then return nil end
  local gettime, MONOTONIC = ptime.clock_gettime, ptime.CLOCK_MONOTONIC
  local okt, t = pcall(gettime, MONOTONIC)
  if not okt or t == nil then return nil end
  if type(t) == "table" then -- luaposix >= 33.3: a PosixTimespec
    return function()
      local ts = gettime(MONOTONIC)
      return ts.tv_sec + ts.tv_nsec * 1e-9
    end
  end
  return function() -- older luaposix: seconds, nanoseconds
    local s, ns = gettime(MONOTONIC)
    return s + ns * 1e-9
  end
end

local function module_function(name, field)
  local ok, mod = pcall(require, name)
  if ok and type(mod) == "table" and type(mod[field]) == "function" then return mod[field] end
  return nil
end

local now = posix_clock()
M.source = "posix"
if not now then now, M.source = module_function("cqueues", "monotime"), "cqueues" end
if not now then now, M.source = os.time, "os.time (whole seconds)" end
M.now = now

return M
