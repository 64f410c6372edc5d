-- What a job asks of Slurm in CPUs and memory, and the cut a decision makes of it: the CPUs as
-- cpus_per_task x tasks, memory per node or per CPU. A value is only ever lowered.

local floor, ceil, max, tonumber = math.floor, math.ceil, math.max, tonumber
local format = string.format

local request = require "harp.request"
local count16, count32, count64, absent32 = request.count16, request.count32, request.count64, request.absent32

local M = {}

local NO_VAL16 = 65534 -- also INFINITE16 = 65535

-- Whether a 16-bit count field was left out: nil or a Slurm sentinel (not: a value that is no count).
local function absent16(v)
  if v == nil then return true end
  local n = tonumber(v)
  return n ~= nil and n >= NO_VAL16
end

-- How the job's CPUs may fall on its nodes, for fewest_cpus: one_node when -N 1 pins it to one node;
-- per_node, the tasks --ntasks-per-node puts on every node (nil: none known).
-- slurmctld makes --ntasks-per-node at least that many tasks' CPUs on every node (pn_min_cpus, from
-- the cpus_per_task this plugin leaves) for a job of more than one task, unless --overcommit, which
-- job_desc does not show: sbatch then sends min_cpus = the node count (1 without -N), where without it
-- min_cpus is tasks x cpus_per_task. So the count is taken only where min_cpus says the latter.
local function spread(get)
  local min_nodes, max_nodes = count32(get("min_nodes"), 0), count32(get("max_nodes"), 0)
  local r = {one_node = min_nodes == 1 and max_nodes == 1}
  local ntpn, tasks = count16(get("ntasks_per_node"), 1), count32(get("num_tasks"), 2)
  local cpus, cpt = count32(get("min_cpus"), 1), count16(get("cpus_per_task"), 1) or 1
  if ntpn and tasks and cpus == tasks * cpt and cpus ~= max(min_nodes or 1, 1) then r.per_node = ntpn end
  return r
end

-- The fewest CPUs Slurm may give a node of the job once it asks `cpus` CPUs (min_cpus), `cpt` per
-- task and at least `pn` on each node (pn_min_cpus, 0: none). Slurm gives each node --mem-per-cpu x
-- its own CPUs, and cons_tres (22.05: _eval_nodes, _cpus_to_use) fills each node it picks with the
-- CPUs it has free, keeping one for each node still to come, whatever the node count: on idle nodes
-- of 4 CPUs, -N 2 -n 4 got 3 CPUs and 1, -N 2-4 -n 4 four nodes of 1 (and -n 4 without -N may get
-- four where nodes are busy). MB per node turned into MB per CPU by the CPUs per node as asked (4
-- on 1 node) left such a node below the memory decided: of the daemon's floor, 1024 MB, 256 MB. So
-- a node holds at least one task, the least CPUs per node and the tasks --ntasks-per-node puts
-- there; a job pinned to one node, all its CPUs (min_cpus, not tasks x cpt: with --overcommit,
-- tasks share them).
local function fewest_cpus(shape, cpus, cpt, pn)
  if shape.one_node then return max(cpus, cpt, pn) end
  return max(cpt, pn, (shape.per_node or 0) * cpt)
end

-- The changes to cut the job to `cpus` CPUs (nil: no CPU decision) and `mem` MB per node (nil: no
-- memory decision). get(field) reads job_desc, set(field, old, new) plans a change, note(text) tells
-- slurmctld.log. Returns what the job gets:
--   cpus_now  the job's CPU count before (nil: not known)
--   kept_cpus its CPU count after a cut (nil: CPUs not cut)
--   got_m     its memory in MB per node as the daemon counts it (per CPU x CPUs / nodes), nil: not cut
--   why       why its CPUs are not the decision's, for the user (nil: no reason to give)
--   memory    {from, to, per_cpu, node_from, node_to}: its memory lowered, MB per node, or per CPU
--             with MB per node as the daemon counts it (per CPU x CPUs / nodes) beside (nil: not)
function M.plan(get, set, note, cpus, mem)
  local r = {}
  -- CPUs: the cut the decision asks for, as cpus_per_task x tasks; made below with memory, since a
  -- --mem-per-cpu job may have to keep more CPUs than that.
  -- {cpt, tasks, min_cpus, min_raw, pn, pn_raw, new_cpt, before}: a CPU cut to make, before is the
  -- count now
  local cut
  r.cpus_now = count32(get("min_cpus"), 1)
  local per_node_raw = get("min_mem_per_node")
  local per_node = count64(per_node_raw, 1)
  local per_cpu = not per_node and count64(get("min_mem_per_cpu"), 1)
  -- the nodes as the daemon counts them, for MB per node in the tag; not where the CPUs fall
  local nodes = count32(get("min_nodes"), 1) or 1
  local shape = per_cpu and spread(get) -- read only where MB per CPU are to be set
  -- a per-CPU job's memory lowered to `to` MB per CPU on `ncpus` CPUs, with MB per node beside: a CPU
  -- cut lowers it even where the MB per CPU stay the user's own
  local function per_cpu_memory(to, ncpus)
    local asked_cpus = count32(get("min_cpus"), 1) or r.cpus_now or ncpus
    r.memory = {per_cpu, to, true, per_cpu * asked_cpus / nodes, to * ncpus / nodes}
  end
  if cpus then
    local cpt = count16(get("cpus_per_task"), 1)
    local min_raw = get("min_cpus")
    local min_cpus = count32(min_raw, 1)
    -- The least CPUs on each node: sbatch, salloc and srun send -c there too (--mincpus when
    -- higher), and Slurm allocates at least that many whatever cpus_per_task says.
    local pn_raw = get("pn_min_cpus")
    local pn = count16(pn_raw, 0)
    if not cpt then
      note("cpus: no --cpus-per-task, left alone")
    elseif not min_cpus and not absent32(min_raw) then
      note("cpus: min_cpus is not a count, left alone")
    elseif not pn and not absent16(pn_raw) then
      note("cpus: pn_min_cpus is not a count, left alone")
    else
      local tasks = count32(get("num_tasks"), 1) or (min_cpus and floor(min_cpus / cpt)) or 1
      if tasks < 1 then tasks = 1 end
      -- round up: splitting the CPUs over the tasks must not give the job fewer than predicted
      local new_cpt = ceil(cpus / tasks)
      r.cpus_now = max(min_cpus or 0, cpt * tasks)
      if new_cpt < 1 or new_cpt >= cpt then
        r.why = format(" (%d tasks x %d CPUs)", tasks, cpt)
      elseif pn and pn > cpt then
        -- more than -c: the user's own --mincpus, which harp does not lower (and on each node)
        r.cpus_now = max(r.cpus_now, pn * nodes)
        note(format("cpus: kept at %d: --mincpus asks %d per node", r.cpus_now, pn))
        r.why = format(": --mincpus asks %d per node", pn)
      elseif not (per_cpu or count64(per_node_raw, 0)) then
        -- No memory asked (--mem=0, the whole node's, is asked): slurmctld gives DefMemPerCPU x the
        -- CPUs, when there is one, which a plugin cannot read: fewer CPUs would cut the memory too,
        -- with no memory decision and below any floor.
        note(format("cpus: kept at %d: no --mem or --mem-per-cpu, and a default per CPU would go with them",
          r.cpus_now))
        r.why = ": without --mem, fewer CPUs may get less memory"
      else
        cut = {cpt = cpt, tasks = tasks, min_cpus = min_cpus, min_raw = min_raw, pn = pn, pn_raw = pn_raw,
          new_cpt = new_cpt, before = r.cpus_now}
      end
    end
  end
  local function cut_cpus(new_cpt)
    local total = new_cpt * cut.tasks
    set("cpus_per_task", get("cpus_per_task"), new_cpt)
    if not cut.min_cpus or total < cut.min_cpus then set("min_cpus", cut.min_raw, total) end
    if cut.pn and cut.pn > new_cpt then set("pn_min_cpus", cut.pn_raw, new_cpt) end
    note(format("cpus_per_task %d->%d", cut.cpt, new_cpt))
    r.why = format(" (%d tasks x %d CPUs)", cut.tasks, new_cpt)
    return total
  end

  if cut and per_cpu then
    -- Slurm gives --mem-per-cpu x CPUs: fewer CPUs keep the job's memory only with more MB per CPU,
    -- and above MaxMemPerCPU (the partition's, else slurm.conf's, which a plugin cannot read) Slurm
    -- turns that into more CPUs per task than the user asked for. So the CPUs are cut only with a
    -- memory decision that leaves the per-CPU value at most the user's own.
    -- the job's CPUs and the least per node after the cut: cut_cpus lowers min_cpus to the total,
    -- and pn_min_cpus to new_cpt
    local total = cut.new_cpt * cut.tasks
    local pn = cut.pn and (cut.pn < cut.new_cpt and cut.pn or cut.new_cpt) or 0
    local after = cut.min_cpus and cut.min_cpus < total and cut.min_cpus or total
    local lowered = mem and ceil(mem / fewest_cpus(shape, after, cut.new_cpt, pn))
    if lowered and lowered <= per_cpu then
      r.kept_cpus = cut_cpus(cut.new_cpt)
      if lowered < per_cpu then set("min_mem_per_cpu", get("min_mem_per_cpu"), lowered) end
      r.got_m = floor(lowered * r.kept_cpus / nodes)
      per_cpu_memory(lowered, r.kept_cpus)
      note(format("mem_per_cpu %d->%d MB (%d MB on %d CPUs)", per_cpu, lowered, lowered * r.kept_cpus,
        r.kept_cpus))
      mem = nil
    else
      note(format("cpus: kept at %d: fewer would need more than the %d MB of --mem-per-cpu asked", cut.before,
        per_cpu))
      r.why = format(": fewer would need more than the %d MB per CPU asked", per_cpu)
    end
    cut = nil
  end
  if cut then r.kept_cpus = cut_cpus(cut.new_cpt) end
  if mem and per_node then
    if mem < per_node then
      set("min_mem_per_node", get("min_mem_per_node"), mem)
      r.got_m = mem
      r.memory = {per_node, mem, false}
      note(format("mem_per_node %d->%d MB", per_node, mem))
    end
  elseif mem and per_cpu then
    -- MB per node -> MB per CPU on the node with the fewest CPUs (no CPU cut here: the CPU count is
    -- the job's own); none below the user's own keeps the memory decided there: no cut
    local ncpus = count32(get("min_cpus"), 1) or 1
    local cpt = count16(get("cpus_per_task"), 1) or 1
    local new = ceil(mem / fewest_cpus(shape, ncpus, cpt, count16(get("pn_min_cpus"), 0) or 0))
    if new >= 1 and new < per_cpu then
      set("min_mem_per_cpu", get("min_mem_per_cpu"), new)
      -- MB per node as the daemon counts it (per CPU x CPUs / nodes), not above what it got
      r.got_m = floor(new * ncpus / nodes)
      per_cpu_memory(new, ncpus)
      note(format("mem_per_cpu %d->%d MB", per_cpu, new))
    end
  elseif mem then
    note("memory: not requested, left alone")
  end
  return r
end

return M
