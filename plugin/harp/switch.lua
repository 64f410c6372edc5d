-- The disable switch (disable_file): on while anything is at its path, whatever it is, unless the path
-- is known not to exist (ENOENT, ENOTDIR). A file slurmctld's user may not read (EACCES) is there all
-- the same. The path is never opened for reading: open() of a FIFO waits for a writer, and slurmctld
-- would wait with it, in its locks, on every submission. lua-posix's stat() tells; without lua-posix,
-- an open for reading and writing, which Linux never makes wait on a FIFO.

local require, type, io_open = require, type, io.open

local M = {}

local ENOENT, ENOTDIR = 2, 20

local function there(ok, errno) return ok or (errno ~= ENOENT and errno ~= ENOTDIR) end

local function by_open(path)
  local f, _, errno = io_open(path, "r+")
  if f then f:close() end
  return there(f ~= nil, errno)
end

-- stat: lua-posix's posix.sys.stat.stat (path -> a table, or nil, message, errno); nil: by_open.
function M.checker(stat)
  if type(stat) ~= "function" then return by_open end
  return function(path)
    local st, _, errno = stat(path)
    return there(st ~= nil, errno)
  end
end

-- present(path): true while the switch is on (nil path: off).
local check = M.checker((require "harp.posix_stat").stat)
function M.present(path)
  if not path then return false end
  return check(path)
end

return M
