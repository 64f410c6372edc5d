-- lua-posix's posix.sys.stat, the one way the plugin and the cli_filter hook learn what a path is
-- without opening it (open() of a FIFO waits, and slurmctld or sbatch with it). A table with `stat`
-- and `S_ISREG` when lua-posix loads, else an empty one: each caller says what it does without.
local ok, pstat = pcall(require, "posix.sys.stat")
if ok and type(pstat) == "table" and type(pstat.stat) == "function" and type(pstat.S_ISREG) == "function" then
  return pstat
end
return {}
