local T = ...
local apply = require "harp.apply"
local tag = require "harp.tag"
local notice = require "harp.notice"

local TIME, MEMORY, CPUS = 1, 2, 3
local ANNOTATE, REWRITE = 1, 2

local function decision(targets, extra)
  local d = {targets = targets, user_message = "", annotation = "", mode = "rewrite"}
  for k, v in pairs(extra or {}) do d[k] = v end
  return d
end

-- The CPUs Slurm gives a job on one node: at least min_cpus, cpus_per_task for each task, and
-- pn_min_cpus, the least CPUs per node (sbatch sends -c there too).
local function max_cpus(jd)
  local per_node = jd.pn_min_cpus ~= nil and jd.pn_min_cpus < 65534 and jd.pn_min_cpus or 0
  local tasks = jd.num_tasks < 4294967294 and jd.num_tasks or 1
  return math.max(jd.min_cpus, jd.cpus_per_task * tasks, per_node)
end

local function run(jd, d, uid)
  local plan = apply.plan(jd, d, uid or 1000)
  T.ok(apply.commit(jd, plan))
  return plan
end

T.test("time is lowered, never raised, never set when not given", function()
  local jd = T.job_desc()
  run(jd, decision {{target = TIME, action = REWRITE, new_value = 60}})
  T.eq(jd.time_limit, 60, "lowered")
  jd = T.job_desc()
  run(jd, decision {{target = TIME, action = REWRITE, new_value = 500}})
  T.eq(jd.time_limit, 120, "not raised")
  jd = T.job_desc()
  run(jd, decision {{target = TIME, action = REWRITE, new_value = 120}})
  T.eq(jd.time_limit, 120, "equal is no change")
  for _, limit in ipairs {4294967294, 4294967295} do
    jd = T.job_desc {time_limit = limit}
    run(jd, decision {{target = TIME, action = REWRITE, new_value = 60}})
    T.eq(jd.time_limit, limit, "sentinel kept")
  end
  jd = T.job_desc()
  run(jd, decision {{target = TIME, action = REWRITE, new_value = 0}})
  T.eq(jd.time_limit, 120, "zero ignored")
  jd = T.job_desc {time_min = 100}
  run(jd, decision {{target = TIME, action = REWRITE, new_value = 60}})
  T.eq(jd.time_min, 60, "time_min follows so it stays <= time_limit")
end)

T.test("only REWRITE in rewrite mode changes values", function()
  local jd = T.job_desc()
  run(jd, decision {{target = TIME, action = ANNOTATE, new_value = 60}})
  T.eq(jd.time_limit, 120, "annotate")
  jd = T.job_desc()
  run(jd, decision({{target = TIME, action = REWRITE, new_value = 60}}, {mode = "shadow"}))
  T.eq(jd.time_limit, 120, "shadow mode")
end)

T.test("memory per node", function()
  local jd = T.job_desc()
  run(jd, decision {{target = MEMORY, action = REWRITE, new_value = 1500}})
  T.eq(jd.min_mem_per_node, 1500, "lowered")
  T.eq(jd.min_mem_per_cpu, nil, "other flavour untouched")
  jd = T.job_desc()
  run(jd, decision {{target = MEMORY, action = REWRITE, new_value = 8000}})
  T.eq(jd.min_mem_per_node, 4000, "not raised")
  jd = T.job_desc {min_mem_per_node = T.NIL}
  run(jd, decision {{target = MEMORY, action = REWRITE, new_value = 100}})
  T.eq(jd.min_mem_per_node, nil, "not given: not set")
  T.eq(jd.min_mem_per_cpu, nil, "not given: not set")
  jd = T.job_desc {min_mem_per_node = 0}
  run(jd, decision {{target = MEMORY, action = REWRITE, new_value = 100}})
  T.eq(jd.min_mem_per_node, 0, "--mem=0 kept")
end)

T.test("memory per cpu is converted with ceil", function()
  -- -N 2 --ntasks-per-node=4: 8 CPUs on 2 nodes (4 per node) at 1000 MB/CPU = 4000 MB per node
  local jd = T.job_desc {min_mem_per_node = T.NIL, min_mem_per_cpu = 1000, min_cpus = 8, min_nodes = 2,
    max_nodes = 2, cpus_per_task = 65534, num_tasks = 8, ntasks_per_node = 4}
  run(jd, decision {{target = MEMORY, action = REWRITE, new_value = 2001}})
  T.eq(jd.min_mem_per_cpu, 501, "ceil(2001 / 4)")
  T.eq(jd.min_mem_per_node, nil, "per node untouched")
  jd = T.job_desc {min_mem_per_node = T.NIL, min_mem_per_cpu = 1000, min_cpus = 4}
  run(jd, decision {{target = MEMORY, action = REWRITE, new_value = 3999}})
  T.eq(jd.min_mem_per_cpu, 1000, "ceil(3999/4) = 1000 is not lower")
end)

T.test("memory per cpu gives each node at least the memory decided, tasks spread unevenly", function()
  -- -N 2 -n 3 --mem-per-cpu=2000: 2 CPUs on one node, 1 on the other. Cut to the floor, 1024 MB per
  -- node, by the average (1.5 CPUs a node) the node of 1 CPU got 683 MB.
  local jd = T.job_desc {min_mem_per_node = T.NIL, min_mem_per_cpu = 2000, min_cpus = 3, num_tasks = 3,
    cpus_per_task = 65534, min_nodes = 2}
  run(jd, decision {{target = MEMORY, action = REWRITE, new_value = 1024}})
  T.eq(jd.min_mem_per_cpu, 1024, "the node of one CPU gets 1024 MB")
  -- -N 2 -n 3 -c 2: whole tasks of 2 CPUs, the fewer on a node 2 CPUs (not 6 / 2).
  jd = T.job_desc {min_mem_per_node = T.NIL, min_mem_per_cpu = 2000, min_cpus = 6, num_tasks = 3,
    cpus_per_task = 2, min_nodes = 2}
  run(jd, decision {{target = MEMORY, action = REWRITE, new_value = 1024}})
  T.eq(jd.min_mem_per_cpu, 512, "2 x 512 MB on the node of one task")
  -- With a CPU cut: -N 2 -n 3 -c 4 --mem-per-cpu=1000 cut to 2 per task, the node of one task has 2.
  jd = T.job_desc {min_mem_per_node = T.NIL, min_mem_per_cpu = 1000, min_cpus = 12, num_tasks = 3,
    cpus_per_task = 4, min_nodes = 2}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 6}, {target = MEMORY, action = REWRITE,
    new_value = 1500}})
  T.eq(jd.cpus_per_task, 2, "cut")
  T.eq(jd.min_mem_per_cpu, 750, "2 x 750 MB on the node of one task")
end)

-- sbatch's job_desc (src/common/slurm_opt.c, src/sbatch/opt.c, 22.05) for `-n tasks --mem-per-cpu
-- per_cpu` and: nodes ({min, max}: -N min-max; nil: no -N), cpt (-c), ntpn (--ntasks-per-node),
-- overcommit (-O, which job_desc does not show: min_cpus is then the node count).
local function sbatch_job(o)
  local NO_VAL, NO_VAL16 = 4294967294, 65534
  local min_cpus = o.tasks * (o.cpt or 1)
  if o.overcommit then min_cpus = math.max(o.nodes and o.nodes[1] or 1, 1) end
  return T.job_desc {min_nodes = o.nodes and o.nodes[1] or NO_VAL, max_nodes = o.nodes and o.nodes[2] or NO_VAL,
    num_tasks = o.tasks, cpus_per_task = o.cpt or NO_VAL16, min_cpus = min_cpus, pn_min_cpus = o.cpt or NO_VAL16,
    ntasks_per_node = o.ntpn or NO_VAL16, min_mem_per_node = T.NIL, min_mem_per_cpu = o.per_cpu}
end

-- The fewest CPUs cons_tres may give a node of job `jd` (as the plugin left it) of options `o`:
-- slurmctld makes pn_min_cpus at least cpus_per_task, and cpus_per_task x --ntasks-per-node for a job
-- of several tasks without -O (job_mgr.c, _copy_job_desc_to_job_record); each node it picks gets the
-- CPUs it has free, one kept for each node still to come (job_test.c, _eval_nodes, _cpus_to_use): a
-- job on two nodes or more may have a node of one task. A job on one node has all its CPUs there.
local function slurm_fewest(jd, o)
  local cpt = jd.cpus_per_task < 65534 and jd.cpus_per_task or 1
  local pn = math.max(jd.pn_min_cpus < 65534 and jd.pn_min_cpus or 0, cpt)
  if o.ntpn and not o.overcommit and o.tasks > 1 then pn = math.max(pn, cpt * o.ntpn) end
  local one_node = (o.nodes and o.nodes[2] == 1) or (o.tasks == 1 and not (o.nodes and o.nodes[1] > 1))
  if one_node then return math.max(jd.min_cpus, pn) end
  return pn
end

T.test("memory per cpu: a node may hold one task wherever the job's tasks per node are not pinned", function()
  -- sbatch -n 4 --mem-per-cpu=4000, cut to the daemon's floor of 1024 MB per node: Slurm may put one
  -- task on a node, which gets 1 CPU x the MB per CPU. By the CPUs per node as asked (4 on min_nodes)
  -- it got 256 MB (no -N) or 512 (-N 2-4).
  local mem = {{target = MEMORY, action = REWRITE, new_value = 1024}}
  for _, case in ipairs {
    {"no -N", {}, 1024},
    {"min_nodes 1, no max", {nodes = {1, 4294967294}}, 1024},
    {"-N 2-4", {nodes = {2, 4}}, 1024},
    {"-N 2: 3 tasks and 1 on nodes of 3 free CPUs", {nodes = {2, 2}}, 1024},
    {"-N 1: all four on one node", {nodes = {1, 1}}, 256},
    {"--ntasks-per-node=2: two a node at least", {ntpn = 2}, 512},
    {"-N 2 --ntasks-per-node=2", {nodes = {2, 2}, ntpn = 2}, 512},
    {"-O -N 2 --ntasks-per-node=2: min_cpus 2, tasks share CPUs", {nodes = {2, 2}, ntpn = 2, overcommit = true}, 1024},
  } do
    local o = {tasks = 4, per_cpu = 4000}
    for k, v in pairs(case[2]) do o[k] = v end
    local jd = sbatch_job(o)
    run(jd, decision(mem, {annotation = "harp:rewrite,m!=1024,m0=16000,v=x"}))
    T.eq(jd.min_mem_per_cpu, case[3], case[1])
    T.ok(jd.min_mem_per_cpu * slurm_fewest(jd, o) >= 1024, case[1] .. ": the node of fewest CPUs keeps the floor")
    T.eq(jd.admin_comment, "harp:rewrite,m!=" .. math.floor(case[3] * jd.min_cpus / (o.nodes and o.nodes[1] or 1))
      .. ",m0=16000,v=x", case[1] .. ": the tag, MB per node as the daemon counts it")
  end
  -- No MB per CPU at most the user's keeps the floor on a node of one task: the memory is kept.
  local jd = sbatch_job {tasks = 4, per_cpu = 500}
  local plan = run(jd, decision(mem, {annotation = "harp:rewrite,m!=1024,m0=2000,v=x",
    user_message = "harp: lowered memory from 2000 MB to 1024 MB."}))
  T.eq(jd.min_mem_per_cpu, 500, "kept")
  T.eq(jd.admin_comment, "harp:rewrite,m=1024,m0=2000,v=x", "no flag")
  T.eq(plan.message, nil, "nothing said")
  -- A CPU cut: -n 2 -c 4 --mem-per-cpu=1000 to 4 CPUs and 3000 MB: a node of one task of 2 CPUs would
  -- need 1500 MB per CPU, above the user's 1000: the CPUs are kept, 750 MB per CPU on them.
  jd = sbatch_job {tasks = 2, cpt = 4, per_cpu = 1000}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 4}, {target = MEMORY, action = REWRITE,
    new_value = 3000}})
  T.eq(jd.cpus_per_task, 4, "CPUs kept")
  T.eq(jd.min_mem_per_cpu, 750, "4 x 750 MB on the node of one task")
end)

T.test("memory per cpu: no node below the memory decided nor above its own (exhaustive small grid)", function()
  local NIL = {}
  local function each(list) return ipairs(list) end
  local runs = 0
  for _, nodes in each {NIL, {1, 1}, {2, 2}, {1, 4}, {2, 4}} do
    for tasks = 1, 5 do
      for _, cpt in each {NIL, 1, 2, 3} do
        for _, ntpn in each {NIL, 1, 2} do
          for _, overcommit in each {false, true} do
            for _, per_cpu in each {7, 1000} do
              for _, mem in each {1, 1024, 2999, 1e6} do
                for _, cpus in each {false, 1, 2, 4} do
                  local o = {nodes = nodes ~= NIL and nodes or nil, tasks = tasks, cpt = cpt ~= NIL and cpt or nil,
                    ntpn = ntpn ~= NIL and ntpn or nil, overcommit = overcommit, per_cpu = per_cpu}
                  if not (o.nodes and o.nodes[1] > tasks) then
                    runs = runs + 1
                    local jd = sbatch_job(o)
                    local before = per_cpu * slurm_fewest(jd, o)
                    local cpus_before = jd.min_cpus
                    local targets = {{target = MEMORY, action = REWRITE, new_value = mem}}
                    if cpus then targets[2] = {target = CPUS, action = REWRITE, new_value = cpus} end
                    run(jd, decision(targets))
                    local after = jd.min_mem_per_cpu * slurm_fewest(jd, o)
                    local at = table.concat({o.nodes and table.concat(o.nodes, "-") or "-", tasks, tostring(o.cpt),
                      tostring(o.ntpn), tostring(overcommit), per_cpu, mem, tostring(cpus)}, " ")
                    T.ok(after >= math.min(before, mem), "a node cut to " .. after .. " MB at " .. at)
                    T.ok(jd.min_mem_per_cpu <= per_cpu, "MB per CPU raised at " .. at)
                    T.ok(jd.min_cpus <= cpus_before, "CPUs raised at " .. at)
                  end
                end
              end
            end
          end
        end
      end
    end
  end
  T.ok(runs > 10000, "the grid ran (" .. runs .. ")")
end)

T.test("cpus: cpus_per_task and min_cpus together, never raised", function()
  local jd = T.job_desc {cpus_per_task = 8, min_cpus = 16, num_tasks = 2}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 8}})
  T.eq(jd.cpus_per_task, 4, "per task")
  T.eq(jd.min_cpus, 8, "total")
  jd = T.job_desc {cpus_per_task = 8, min_cpus = 8, num_tasks = 4294967294}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 3}})
  T.eq(jd.cpus_per_task, 3, "one task")
  T.eq(jd.min_cpus, 3, "min_cpus")
  jd = T.job_desc {cpus_per_task = 4, min_cpus = 4}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 16}})
  T.eq(jd.cpus_per_task, 4, "not raised")
  T.eq(jd.min_cpus, 4, "not raised")
  jd = T.job_desc {cpus_per_task = 65534, min_cpus = 8, num_tasks = 8}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 2}})
  T.eq(jd.min_cpus, 8, "no -c: tasks keep their CPU")
  T.eq(jd.cpus_per_task, 65534, "no -c")
  jd = T.job_desc {cpus_per_task = 2, min_cpus = 4, num_tasks = 2}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 3}})
  T.eq(jd.cpus_per_task, 2, "3 CPUs over 2 tasks round up to 2 per task: no change")
  T.eq(jd.min_cpus, 4, "min_cpus unchanged")
end)

T.test("a CPU cut lowers the least CPUs per node that -c set (pn_min_cpus)", function()
  -- sbatch -c 8 sends pn_min_cpus = 8, and Slurm allocates at least that many per node: a cut of
  -- cpus_per_task and min_cpus alone still gave the job 8 CPUs, its tag saying 2.
  local jd = T.job_desc {cpus_per_task = 8, min_cpus = 8, num_tasks = 4294967294}
  T.eq(jd.pn_min_cpus, 8, "as sbatch sends it")
  local plan = run(jd, decision({{target = CPUS, action = REWRITE, new_value = 2}},
    {annotation = "harp:rewrite,c!=2/q0.9,c0=8,v=c@1", user_message = "harp: lowered cpus from 8 cpus to 2 cpus."}))
  T.eq(jd.cpus_per_task, 2, "per task")
  T.eq(jd.min_cpus, 2, "total")
  T.eq(jd.pn_min_cpus, 2, "per node")
  T.eq(max_cpus(jd), 2, "what Slurm gives")
  T.eq(jd.admin_comment, "harp:rewrite,c!=2/q0.9,c0=8,v=c@1", "the tag says what the job got")
  T.eq(plan.message, "harp: lowered cpus from 8 cpus to 2 cpus.", "as announced")
  -- -n 2 -c 4 cut to 4: 2 per task, 2 per node at least.
  jd = T.job_desc {cpus_per_task = 4, min_cpus = 8, num_tasks = 2}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 4}})
  T.eq(jd.pn_min_cpus, 2, "-n 2")
  -- Below the new CPUs per task, or not given: as it was.
  for _, pn in ipairs {1, 65534} do
    jd = T.job_desc {cpus_per_task = 8, min_cpus = 8, pn_min_cpus = pn}
    run(jd, decision {{target = CPUS, action = REWRITE, new_value = 2}})
    T.eq(jd.cpus_per_task, 2, "cut beside pn_min_cpus " .. pn)
    T.eq(jd.pn_min_cpus, pn, "pn_min_cpus " .. pn .. " as it was")
  end
  jd = T.job_desc {cpus_per_task = 8, min_cpus = 8, pn_min_cpus = T.NIL}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 2}})
  T.eq(jd.cpus_per_task, 2, "cut without pn_min_cpus")
  T.eq(jd.pn_min_cpus, nil, "none set")
end)

T.test("a job whose --mincpus asks more than -c keeps its CPUs", function()
  -- -c 8 --mincpus=12: pn_min_cpus is the user's own 12, which harp does not lower; cutting the
  -- CPUs per task alone would change nothing Slurm gives.
  local jd = T.job_desc {cpus_per_task = 8, min_cpus = 8, pn_min_cpus = 12}
  local plan = run(jd, decision({{target = TIME, action = REWRITE, new_value = 60},
    {target = CPUS, action = REWRITE, new_value = 2}}, {annotation = "harp:rewrite,t!=60,t0=120,c!=2,c0=8,v=x",
    user_message = "harp: lowered time from 02:00:00 to 01:00:00, cpus from 8 cpus to 2 cpus."}))
  T.eq(jd.cpus_per_task, 8, "per task kept")
  T.eq(jd.min_cpus, 8, "total kept")
  T.eq(jd.pn_min_cpus, 12, "per node kept")
  T.eq(jd.time_limit, 60, "the time still cut")
  T.eq(jd.admin_comment, "harp:rewrite,t!=60,t0=120,c=2,c0=8,v=x", "no CPU flag")
  T.eq(plan.notes[1], "cpus: kept at 12: --mincpus asks 12 per node", "noted")
  T.eq(plan.message, "harp: lowered time from 02:00:00 to 01:00:00; CPUs kept at 12: --mincpus asks 12 per node.",
    "said: the CPUs Slurm gives it")
  -- A pn_min_cpus that is there but no count: left alone, as min_cpus.
  for _, bad in ipairs {2.5, -1, "many"} do
    jd = T.job_desc {cpus_per_task = 8, min_cpus = 8, pn_min_cpus = bad}
    plan = run(jd, decision {{target = CPUS, action = REWRITE, new_value = 2}})
    T.eq(jd.cpus_per_task, 8, "kept beside pn_min_cpus " .. tostring(bad))
    T.eq(jd.pn_min_cpus, bad, "pn_min_cpus " .. tostring(bad) .. " kept")
    T.ok(not plan.rewrote, "no change beside pn_min_cpus " .. tostring(bad))
  end
end)

T.test("a job that asks no memory keeps its CPUs", function()
  -- Without --mem or --mem-per-cpu slurmctld gives DefMemPerCPU x the CPUs (job_mgr.c, when the
  -- partition or slurm.conf has one, which the plugin cannot read): 8 CPUs cut to 1 took 16000 MB
  -- down to 2000, with no memory decision and no floor.
  local jd = T.job_desc {min_mem_per_node = T.NIL, min_mem_per_cpu = T.NIL, cpus_per_task = 8, min_cpus = 8}
  local plan = run(jd, decision({{target = CPUS, action = REWRITE, new_value = 1}},
    {annotation = "harp:rewrite,c!=1,c0=8,v=c@1", user_message = "harp: lowered cpus from 8 cpus to 1 cpus."}))
  T.eq(jd.cpus_per_task, 8, "per task kept")
  T.eq(jd.min_cpus, 8, "total kept")
  T.eq(jd.pn_min_cpus, 8, "per node kept")
  T.eq(jd.admin_comment, "harp:rewrite,c=1,c0=8,v=c@1", "no CPU flag")
  T.ok(not plan.rewrote, "no change")
  T.eq(plan.message, nil, "no cut announced")
  T.eq(plan.notes[1], "cpus: kept at 8: no --mem or --mem-per-cpu, and a default per CPU would go with them",
    "noted")
  -- --mem=0 asks the whole node's memory, which fewer CPUs keep.
  jd = T.job_desc {min_mem_per_node = 0, cpus_per_task = 8, min_cpus = 8}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 1}})
  T.eq(jd.cpus_per_task, 1, "--mem=0: cut")
  T.eq(jd.min_mem_per_node, 0, "--mem=0 kept")
end)

T.test("cpus: a min_cpus that is there but no count is never written over", function()
  -- Not given (the sentinel): min_cpus follows the lowered CPUs per task.
  local jd = T.job_desc {cpus_per_task = 8, min_cpus = 4294967294, num_tasks = 2}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 8}})
  T.eq(jd.cpus_per_task, 4, "per task")
  T.eq(jd.min_cpus, 8, "not given: set to the new total")
  -- Malformed (found by the fuzz test: 60.7 became 77673): the job's CPUs are left alone.
  for _, bad in ipairs {60.7, -3, 0, "many"} do
    jd = T.job_desc {cpus_per_task = 8, min_cpus = bad, num_tasks = 9709}
    local plan = run(jd, decision {{target = CPUS, action = REWRITE, new_value = 9709}})
    T.eq(jd.min_cpus, bad, "min_cpus " .. tostring(bad) .. " kept")
    T.eq(jd.cpus_per_task, 8, "per task kept beside min_cpus " .. tostring(bad))
    T.ok(not plan.rewrote, "no change for min_cpus " .. tostring(bad))
  end
end)

T.test("cpus and per-cpu memory combine to the requested memory per node", function()
  local jd = T.job_desc {cpus_per_task = 8, min_cpus = 8, num_tasks = 1, min_mem_per_node = T.NIL,
    min_mem_per_cpu = 1000}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 4},
    {target = MEMORY, action = REWRITE, new_value = 2000}})
  T.eq(jd.min_cpus, 4, "cpus")
  T.eq(jd.min_mem_per_cpu, 500, "2000 MB over the 4 remaining CPUs")
end)

T.test("a --mem-per-cpu job's CPUs are not cut where its MB per CPU would rise", function()
  -- -c 2 --mem-per-cpu=600: one CPU would need 1200 MB per CPU to keep the job's memory, and above
  -- MaxMemPerCPU Slurm turns more MB per CPU into more CPUs per task than the user asked for.
  local jd = T.job_desc {cpus_per_task = 2, min_cpus = 2, num_tasks = 1, min_mem_per_node = T.NIL,
    min_mem_per_cpu = 600}
  local plan = run(jd, decision({{target = CPUS, action = REWRITE, new_value = 1}},
    {user_message = "harp: lowered cpus to 1."}))
  T.eq(jd.min_cpus, 2, "cpus kept")
  T.eq(jd.cpus_per_task, 2, "cpus per task kept")
  T.eq(jd.min_mem_per_cpu, 600, "memory per CPU kept")
  T.ok(not plan.rewrote, "no change")
  T.eq(plan.message, nil, "the cut is not announced")
  T.eq(plan.notes[1], "cpus: kept at 2: fewer would need more than the 600 MB of --mem-per-cpu asked", "noted")
  -- A memory decision that is not lower leaves memory and CPUs as asked.
  jd = T.job_desc {cpus_per_task = 4, min_cpus = 4, num_tasks = 1, min_mem_per_node = T.NIL,
    min_mem_per_cpu = 1000}
  plan = run(jd, decision {{target = CPUS, action = REWRITE, new_value = 3},
    {target = MEMORY, action = REWRITE, new_value = 5000}})
  T.eq(jd.min_cpus, 4, "cpus kept")
  T.eq(jd.min_mem_per_cpu, 1000, "memory kept")
  T.ok(not plan.rewrote, "no change")
  -- Per-node memory is not touched by a CPU rewrite.
  jd = T.job_desc {cpus_per_task = 4, min_cpus = 4, num_tasks = 1}
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 2}})
  T.eq(jd.min_mem_per_node, 4000, "per node kept")
  T.eq(jd.min_mem_per_cpu, nil, "no per-CPU value invented")
end)

-- -c cpt, -n tasks, --mem-per-cpu mb.
local function mem_per_cpu_job(cpt, tasks, mb)
  return T.job_desc {cpus_per_task = cpt, min_cpus = cpt * tasks, num_tasks = tasks, min_mem_per_node = T.NIL,
    min_mem_per_cpu = mb}
end

-- The time limit (120) cut to 60 and the CPUs to `cpus`, with a message from the daemon.
local function cut_time_and_cpus(jd, cpus)
  return run(jd, decision({{target = TIME, action = REWRITE, new_value = 60},
    {target = CPUS, action = REWRITE, new_value = cpus}}, {user_message = "harp: lowered."}))
end

T.test("a --mem-per-cpu job's CPUs are cut with a memory decision that keeps its MB per CPU", function()
  -- 4 x 1000 MB, cut to 2 CPUs and 2000 MB: 1000 MB per CPU, the user's own.
  local jd = mem_per_cpu_job(4, 1, 1000)
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 2}, {target = MEMORY, action = REWRITE,
    new_value = 2000}})
  T.eq(jd.min_cpus, 2, "cpus")
  T.eq(jd.min_mem_per_cpu, 1000, "2000 MB over 2 CPUs")
  -- Cut to 2 CPUs and 3000 MB: 1500 MB per CPU would be above the 1000 asked, so the CPUs stay and
  -- the memory decision is made on them (750 MB each).
  jd = mem_per_cpu_job(4, 1, 1000)
  run(jd, decision {{target = CPUS, action = REWRITE, new_value = 2}, {target = MEMORY, action = REWRITE,
    new_value = 3000}})
  T.eq(jd.min_cpus, 4, "cpus kept")
  T.eq(jd.min_mem_per_cpu, 750, "3000 MB over the 4 CPUs")
  -- CPUs kept, but the time limit cut: the line says what was cut, and that the CPUs were kept, and why.
  jd = mem_per_cpu_job(5, 1, 1000)
  local plan = cut_time_and_cpus(jd, 3)
  T.eq(jd.time_limit, 60, "time cut")
  T.eq(jd.min_cpus, 5, "cpus kept")
  T.eq(plan.message, "harp: lowered time from 02:00:00 to 01:00:00; CPUs kept at 5: fewer would need more than "
    .. "the 1000 MB per CPU asked.", "kept, and why")
  -- Rounded to whole CPUs per task: the CPUs the job got, 3 CPUs over 2 tasks are 4.
  jd = T.job_desc {cpus_per_task = 4, min_cpus = 8, num_tasks = 2}
  plan = cut_time_and_cpus(jd, 3)
  T.eq(jd.min_cpus, 4, "two per task")
  T.eq(plan.message, "harp: lowered time from 02:00:00 to 01:00:00, CPUs from 8 to 4.", "rounded")
  -- Rounded back to the job's own: kept, and why.
  jd = T.job_desc {cpus_per_task = 2, min_cpus = 4, num_tasks = 2}
  plan = cut_time_and_cpus(jd, 3)
  T.eq(plan.message, "harp: lowered time from 02:00:00 to 01:00:00; CPUs kept at 4 (2 tasks x 2 CPUs).", "kept")
end)

T.test("the user's line says what was applied, not a cut the plugin did not make", function()
  local basis = " (90% of similar past jobs finished within it)."
  local said = "harp: lowered time from 02:00:00 to 01:00:00, memory from 4000 MB to 2000 MB" .. basis
  local both = {{target = TIME, action = REWRITE, new_value = 60}, {target = MEMORY, action = REWRITE,
    new_value = 2000}}
  -- All applied as decided: the daemon's line as it is.
  local plan = run(T.job_desc(), decision(both, {user_message = said}))
  T.eq(plan.message, said, "as decided")
  -- The time left alone above the partition's MaxTime (100 min), the memory cut: memory only.
  local jd = T.job_desc()
  plan = apply.plan(jd, decision(both, {user_message = said}), 1000, 100)
  T.ok(apply.commit(jd, plan))
  T.eq(jd.time_limit, 120, "time kept")
  T.eq(jd.min_mem_per_node, 2000, "memory cut")
  T.eq(plan.message, "harp: lowered memory from 4000 MB to 2000 MB" .. basis, "memory only")
  -- Memory per CPU, rounded per CPU: per CPU, as set. The daemon's line with no basis: none.
  jd = T.job_desc {min_mem_per_node = T.NIL, min_mem_per_cpu = 1000, min_cpus = 4, num_tasks = 4,
    cpus_per_task = 65534, max_nodes = 1}
  plan = run(jd, decision({{target = MEMORY, action = REWRITE, new_value = 2001}},
    {user_message = "harp: lowered memory from 4000 MB to 2001 MB."}))
  T.eq(plan.message, "harp: lowered memory from 1000 MB to 501 MB per CPU and from 4000 MB to 2004 MB per node.",
    "per CPU, and per node")
  -- A change with no line of the daemon's still gets one; a time limit of days in Slurm's spelling.
  plan = run(T.job_desc {time_limit = 4320}, decision {{target = TIME, action = REWRITE, new_value = 1501}})
  T.eq(plan.message, "harp: lowered time from 3-00:00:00 to 1-01:01:00.", "days")
  -- Nothing lower: nothing said.
  plan = run(T.job_desc {time_limit = 30, min_mem_per_node = 1000}, decision(both, {user_message = said}))
  T.eq(plan.message, nil, "nothing said")
end)

T.test("a --mem-per-cpu job's line says its memory per node whenever that is below what was asked", function()
  local basis = " (90% of similar past jobs finished within it)"
  -- -N 1 -n 3 -c 5 --mem-per-cpu=6000 (90000 MB) cut to 4 CPUs and 35999 MB: 2 CPUs a task, 6 CPUs,
  -- 6000 MB each, the user's own; the job's memory falls to 36000 MB, which the line did not say.
  local jd = T.job_desc {num_tasks = 3, cpus_per_task = 5, min_cpus = 15, max_nodes = 1, min_mem_per_node = T.NIL,
    min_mem_per_cpu = 6000}
  local plan = run(jd, decision({{target = MEMORY, action = REWRITE, new_value = 35999},
    {target = CPUS, action = REWRITE, new_value = 4}}, {user_message = "harp: lowered memory from 90000 MB to "
    .. "35999 MB, cpus from 15 cpus to 4 cpus" .. basis .. ".", annotation = "harp:rewrite,m!=35999,m0=90000,"
    .. "c!=4,c0=15,v=x"}))
  T.eq(jd.min_mem_per_cpu, 6000, "the user's own MB per CPU")
  T.eq(jd.min_cpus, 6, "6 CPUs")
  T.eq(jd.admin_comment, "harp:rewrite,m!=36000,m0=90000,c!=6,c0=15,v=x", "the tag")
  T.eq(plan.message, "harp: lowered memory from 90000 MB to 36000 MB per node, CPUs from 15 to 6" .. basis .. ".",
    "memory per node said")
  for _, c in ipairs(plan.changes) do
    T.ok(c[1] ~= "min_mem_per_cpu", "min_mem_per_cpu not written over with its own value")
  end
  -- per CPU lowered too: both, per CPU as set and per node as the daemon counts it (a job of 3 CPUs on
  -- 2 nodes pinned by --ntasks-per-node: 1501.5 MB a node asked)
  jd = T.job_desc {num_tasks = 3, cpus_per_task = 1, min_cpus = 3, min_nodes = 2, max_nodes = 2, ntasks_per_node = 2,
    pn_min_cpus = 1, min_mem_per_node = T.NIL, min_mem_per_cpu = 1001}
  plan = run(jd, decision {{target = MEMORY, action = REWRITE, new_value = 1000}})
  T.eq(jd.min_mem_per_cpu, 500, "1000 MB over the 2 CPUs a node holds")
  T.eq(plan.message, "harp: lowered memory from 1001 MB to 500 MB per CPU and from 1501.5 MB to 750 MB per node.",
    "per CPU and per node")
end)

T.test("a CPU cut on a --mem-per-cpu job never raises its memory nor its MB per CPU (exhaustive small grid)", function()
  for cpt = 1, 12 do
    for tasks = 1, 3 do
      for _, per_cpu in ipairs {1, 2, 3, 7, 1000, 1001} do
        for new = 0, 13 do
          for _, mem in ipairs {false, 1, 5, 999, 3000, 1e6} do
            local asked = per_cpu * cpt * tasks
            local jd = mem_per_cpu_job(cpt, tasks, per_cpu)
            local targets = {{target = CPUS, action = REWRITE, new_value = new}}
            local ann = "harp:rewrite,c!=" .. new
            if mem then
              targets[2] = {target = MEMORY, action = REWRITE, new_value = mem}
              ann = ann .. ",m!=" .. mem
            end
            run(jd, decision(targets, {annotation = ann .. ",v=x"}))
            local got = jd.min_mem_per_cpu * max_cpus(jd)
            local at = table.concat({cpt, tasks, per_cpu, new, tostring(mem)}, " ")
            -- the tag: a flag and the value applied where the plugin changed the target, else no flag
            local cpus = max_cpus(jd)
            local want = cpus < cpt * tasks and "harp:rewrite,c!=" .. cpus or "harp:rewrite,c=" .. new
            if mem then want = want .. (got < asked and ",m!=" .. got or ",m=" .. mem) end
            T.eq(jd.admin_comment, want .. ",v=x", "the tag at " .. at)
            T.ok(jd.min_cpus <= cpt * tasks and jd.cpus_per_task <= cpt, "cpus raised at " .. at)
            T.ok(got <= asked, "memory raised to " .. got .. " from " .. asked .. " at " .. at)
            T.ok(got >= math.min(asked, mem or asked), "memory cut to " .. got .. " from " .. asked .. " at " .. at)
            T.ok(jd.min_mem_per_cpu >= 1 and jd.min_mem_per_cpu % 1 == 0, "a whole MB per CPU at " .. at)
            T.ok(jd.min_mem_per_cpu <= per_cpu, "MB per CPU raised to " .. jd.min_mem_per_cpu .. " at " .. at)
          end
        end
      end
    end
  end
end)

-- The harp tag written to admin_comment for a decision with annotation `ann` (uid 1000).
local function tag_after(jd, targets, ann, extra)
  extra = extra or {}
  extra.annotation = ann
  run(jd, decision(targets, extra))
  return jd.admin_comment
end

-- A rewrite-mode tag as the daemon writes it: `items` between the mode and the versions.
local function daemon_tag(items)
  return "harp:rewrite," .. items .. ",v=time@1+cpus@2"
end

T.test("the tag records the CPUs applied: rounded per task, kept for --mem-per-cpu", function()
  -- -n 2 -c 4 cut to 3: 2 per task, 4 CPUs.
  local jd = T.job_desc {cpus_per_task = 4, min_cpus = 8, num_tasks = 2}
  T.eq(tag_after(jd, {{target = TIME, action = REWRITE, new_value = 60}, {target = CPUS, action = REWRITE,
    new_value = 3}}, daemon_tag("t!=60/q0.9,t0=120,c!=3/q0.9,c0=8")),
    daemon_tag("t!=60/q0.9,t0=120,c!=4/q0.9,c0=8"), "rounded up per task")
  T.eq(jd.min_cpus, 4, "the job's CPUs")
  -- -c 5 --mem-per-cpu=1000 cut to 3 keeps its 5 CPUs: no flag, the value stays the prediction.
  jd = mem_per_cpu_job(5, 1, 1000)
  T.eq(tag_after(jd, {{target = CPUS, action = REWRITE, new_value = 3}}, daemon_tag("c!=3,c0=5")),
    daemon_tag("c=3,c0=5"), "kept")
  T.eq(jd.min_cpus, 5, "the job's CPUs")
end)

T.test("the tag drops the flag of a cut the plugin did not make", function()
  -- -c 4 --mem-per-cpu=1000 cut to 3 keeps its 4 CPUs: no "!", the value stays the prediction; the
  -- time cut stays flagged.
  local jd = mem_per_cpu_job(4, 1, 1000)
  T.eq(tag_after(jd, {{target = TIME, action = REWRITE, new_value = 60}, {target = CPUS, action = REWRITE,
    new_value = 3}}, daemon_tag("t!=60,t0=120,c!=3/q0.9,c0=4")), daemon_tag("t!=60,t0=120,c=3/q0.9,c0=4"),
    "CPUs kept")
  T.eq(jd.min_cpus, 4, "kept")
  -- 3 CPUs over 2 tasks of 2 is no cut either.
  jd = T.job_desc {cpus_per_task = 2, min_cpus = 4, num_tasks = 2}
  T.eq(tag_after(jd, {{target = CPUS, action = REWRITE, new_value = 3}}, daemon_tag("c!=3,c0=4")),
    daemon_tag("c=3,c0=4"), "rounds back to the job's own")
  -- Memory and time not below the job's own, an action its mode does not carry out, a time_min the
  -- user gave: no flag.
  jd = T.job_desc()
  T.eq(tag_after(jd, {{target = TIME, action = REWRITE, new_value = 500}, {target = MEMORY, action = REWRITE,
    new_value = 8000}}, daemon_tag("t!=500,m!=8000")), daemon_tag("t=500,m=8000"), "not lower")
  jd = T.job_desc()
  T.eq(tag_after(jd, {{target = TIME, action = REWRITE, new_value = 60}, {target = MEMORY, action = REWRITE,
    new_value = 1000}}, "harp:extend,t!=60,t0=120,m!=1000,v=x", {mode = "extend"}),
    "harp:extend,t!=60,t0=120,m=1000,v=x", "memory is not cut in extend mode")
  jd = T.job_desc {time_min = 30}
  T.eq(tag_after(jd, {{target = TIME, action = 3, new_value = 60}}, "harp:time_min,t~=60,t0=120,v=x",
    {mode = "time_min"}), "harp:time_min,t=60,t0=120,v=x", "the user's own time_min")
  jd = T.job_desc()
  T.eq(tag_after(jd, {{target = TIME, action = 3, new_value = 60}}, "harp:time_min,t~=60,t0=120,v=x",
    {mode = "time_min"}), "harp:time_min,t~=60,t0=120,v=x", "time_min set: kept")
end)

T.test("the tag records the memory applied per node after rounding per CPU", function()
  -- 8 CPUs on 2 nodes (4 each) at 1000 MB/CPU cut to 2001 MB per node: 501 MB/CPU, 2004 MB per node.
  local jd = T.job_desc {min_mem_per_node = T.NIL, min_mem_per_cpu = 1000, min_cpus = 8, min_nodes = 2,
    max_nodes = 2, cpus_per_task = 65534, num_tasks = 8, ntasks_per_node = 4}
  T.eq(tag_after(jd, {{target = MEMORY, action = REWRITE, new_value = 2001}}, daemon_tag("m!=2001,m0=4000")),
    daemon_tag("m!=2004,m0=4000"), "rounded per CPU")
  -- CPUs and memory cut together: 2000 MB over 3 CPUs is 667 MB each, 2001 MB.
  jd = mem_per_cpu_job(4, 1, 1000)
  T.eq(tag_after(jd, {{target = CPUS, action = REWRITE, new_value = 3}, {target = MEMORY, action = REWRITE,
    new_value = 2000}}, daemon_tag("c!=3,c0=4,m!=2000,m0=4000")), daemon_tag("c!=3,c0=4,m!=2001,m0=4000"),
    "with a CPU cut")
  -- Per node: exact.
  jd = T.job_desc()
  T.eq(tag_after(jd, {{target = MEMORY, action = REWRITE, new_value = 1500}}, daemon_tag("m!=1500,m0=4000")),
    daemon_tag("m!=1500,m0=4000"), "per node")
end)

T.test("a decision that carries no value leaves no flag claiming a change", function()
  -- REWRITE or SET_TIME_MIN without new_value: nothing is changed, and report and metrics read a
  -- flagged item as the limit harp set.
  for _, case in ipairs {
    {"rewrite", REWRITE, "harp:rewrite,t!=60,t0=120,m!=2000,m0=4000,v=x",
      "harp:rewrite,t=60,t0=120,m=2000,m0=4000,v=x"},
    {"extend", REWRITE, "harp:extend,t!=60,t0=120,v=x", "harp:extend,t=60,t0=120,v=x"},
    {"time_min", 3, "harp:time_min,t~=60,t0=120,v=x", "harp:time_min,t=60,t0=120,v=x"},
  } do
    local mode, action, ann, want = case[1], case[2], case[3], case[4]
    local targets = {{target = TIME, action = action}}
    if mode == "rewrite" then targets[2] = {target = MEMORY, action = REWRITE} end
    local jd = T.job_desc {time_min = 4294967294}
    local plan = run(jd, decision(targets, {mode = mode, annotation = ann, user_message = "harp: lowered."}))
    T.eq(jd.admin_comment, want, mode)
    T.eq(jd.time_limit, 120, mode .. ": limit kept")
    T.ok(not plan.rewrote and plan.message == nil, mode .. ": nothing announced")
    T.eq(plan.notes[1], "action " .. action .. " on target 1: no value to apply (nil), left alone", mode)
    T.ok(plan.fault, mode .. ": a fault")
  end
end)

T.test("a tag that needs no change is not rebuilt", function()
  local rebuild = tag.applied_tag
  tag.applied_tag = function() error("rebuilt") end
  local ok, err = pcall(function()
    local jd = T.job_desc {cpus_per_task = 4, min_cpus = 8, num_tasks = 2}
    T.eq(tag_after(jd, {{target = TIME, action = REWRITE, new_value = 60}, {target = MEMORY, action = REWRITE,
      new_value = 1500}, {target = CPUS, action = REWRITE, new_value = 4}},
      daemon_tag("t!=60,t0=120,m!=1500,m0=4000,c!=4,c0=8")), daemon_tag("t!=60,t0=120,m!=1500,m0=4000,c!=4,c0=8"),
      "all applied as decided")
    jd = T.job_desc()
    T.eq(tag_after(jd, {}, "harp:shadow,t=60/q0.9,v=x", {mode = "shadow"}), "harp:shadow,t=60/q0.9,v=x", "shadow")
  end)
  tag.applied_tag = rebuild
  T.ok(ok, err)
end)

T.test("a tag rebuilt stays within MAX_ANNOTATION", function()
  -- 9 CPUs over 2 tasks are 10: one digit more. At the bound, the item is left out, not cut short.
  local head = "harp:rewrite,t!=60,t0=120,c!=9,c0=16,v="
  local ann = head .. string.rep("v", tag.MAX_ANNOTATION - #head)
  local jd = T.job_desc {cpus_per_task = 8, min_cpus = 16, num_tasks = 2}
  T.eq(tag_after(jd, {{target = TIME, action = REWRITE, new_value = 60}, {target = CPUS, action = REWRITE,
    new_value = 9}}, ann), "harp:rewrite,t!=60,t0=120,c0=16,v=" .. string.rep("v", tag.MAX_ANNOTATION - #head),
    "the CPU item left out")
  T.eq(jd.min_cpus, 10, "the CPUs still cut")
  ann = head .. string.rep("v", tag.MAX_ANNOTATION - #head - 1)
  jd = T.job_desc {cpus_per_task = 8, min_cpus = 16, num_tasks = 2}
  T.eq(#tag_after(jd, {{target = TIME, action = REWRITE, new_value = 60}, {target = CPUS, action = REWRITE,
    new_value = 9}}, ann), tag.MAX_ANNOTATION,
    "one byte to spare: rewritten")
  T.ok(jd.admin_comment:find(",c!=10,", 1, true), jd.admin_comment)
  -- An item's /q or /k suffix goes with it: left behind, it would stick to the item before and no
  -- reader could parse the tag.
  head = "harp:rewrite,t!=60/q0.9,t0=120,c!=9/q0.9,c0=16,v="
  ann = head .. string.rep("v", tag.MAX_ANNOTATION - #head)
  jd = T.job_desc {cpus_per_task = 8, min_cpus = 16, num_tasks = 2}
  T.eq(tag_after(jd, {{target = TIME, action = REWRITE, new_value = 60}, {target = CPUS, action = REWRITE,
    new_value = 9}}, ann), "harp:rewrite,t!=60/q0.9,t0=120,c0=16,v=" .. string.rep("v", tag.MAX_ANNOTATION - #head),
    "the CPU item left out with its suffix")
  jd = T.job_desc {cpus_per_task = 8, min_cpus = 16, num_tasks = 2}
  T.eq(tag_after(jd, {{target = TIME, action = REWRITE, new_value = 60}, {target = CPUS, action = REWRITE,
    new_value = 9}}, "harp:rewrite,t!=60/q0.9,t0=120,c!=9/q0.9/k,c0=16,v=x"),
    "harp:rewrite,t!=60/q0.9,t0=120,c!=10/q0.9/k,c0=16,v=x", "rewritten with its suffix")
end)

T.test("the tag's t0, what harp guard extends up to, is the job's own limit", function()
  -- The daemon's word is not taken: a t0 above the request would let the guard raise the job past it.
  local jd = T.job_desc()
  T.eq(tag_after(jd, {{target = TIME, action = REWRITE, new_value = 60}}, "harp:extend,t!=60,t0=100000,v=x",
    {mode = "extend"}), "harp:extend,t!=60,t0=120,v=x", "the job's 120 min")
  T.eq(jd.time_limit, 60, "cut")
  jd = T.job_desc()
  T.eq(tag_after(jd, {{target = TIME, action = REWRITE, new_value = 60}},
    "harp:extend,t!=60,t0=5,t0=100000,v=x", {mode = "extend"}), "harp:extend,t!=60,t0=120,t0=120,v=x",
    "every t0 (a reader takes the last)")
  -- A flag on a target the decision does not change is dropped, the value kept as a prediction.
  jd = T.job_desc()
  T.eq(tag_after(jd, {}, "harp:extend,t!=60,t0=100000,v=x", {mode = "extend"}), "harp:extend,t=60,t0=120,v=x",
    "no time decision: no flag")
  T.eq(jd.time_limit, 120, "not cut")
  jd = T.job_desc()
  T.eq(tag_after(jd, {{target = TIME, action = ANNOTATE, new_value = 60}}, "harp:rewrite,t!=60,m~=5,v=x"),
    "harp:rewrite,t=60,m=5,v=x", "an annotation is no cut")
  -- No limit of the job's own: no t0.
  jd = T.job_desc {time_limit = 4294967294}
  T.eq(tag_after(jd, {}, "harp:shadow,t=60,t0=120,v=x", {mode = "shadow"}), "harp:shadow,t=60,v=x", "none")
end)

T.test("in extend and time_min modes no limit is changed without a tag harp guard extends by", function()
  local SET_TIME_MIN = 3
  -- The guard reads a tag with core/tag.py's parse_tag: one it does not read is no tag to it.
  local cases = {
    {"extend", REWRITE, nil, "no annotation"},
    {"extend", REWRITE, "harp:extend,t!=30,v=x", "no t0"},
    {"extend", REWRITE, "harp:rewrite,t!=30,t0=120,v=x", "another mode's tag"},
    {"extend", REWRITE, "harp:extend,t!=30,t0=120,g=2,v=x", "an item the guard does not know"},
    {"extend", REWRITE, "harp:extend,t!=30,t0=120,,v=x", "an empty item"},
    {"extend", REWRITE, "harp:extend,t!=30,t0=120,v=x,", "a trailing comma"},
    {"extend", REWRITE, "harp:extend,t!=30,t0=120,m=12345678901234567,v=x", "17 digits"},
    {"extend", REWRITE, "harp:extend,t!=30,t0=120,m=9007199254740993,v=x", "a number past 2^53"},
    {"extend", REWRITE, "harp:extend,t!=30/q0.9x,t0=120,v=x", "a suffix the guard does not read"},
    {"extend", REWRITE, "harp:extend,t!=30/k/q0.9,t0=120,v=x", "suffixes out of order"},
    {"time_min", SET_TIME_MIN, "harp:time_min,t~=30,v=x", "no t0"},
    {"time_min", SET_TIME_MIN, "harp:time_min,t~=30,t0=120,g=2,v=x", "an item the guard does not know"},
  }
  for _, case in ipairs(cases) do
    local mode, action, ann, what = case[1], case[2], case[3], case[4]
    local jd = T.job_desc {time_min = 4294967294}
    local plan = run(jd, decision({{target = TIME, action = action, new_value = 30}},
      {mode = mode, annotation = ann, user_message = "harp: lowered."}))
    T.eq(jd.time_limit, 120, mode .. ", " .. what .. ": limit kept")
    T.eq(jd.time_min, 4294967294, mode .. ", " .. what .. ": time_min kept")
    T.ok(not plan.rewrote and plan.message == nil, mode .. ", " .. what .. ": nothing announced")
    local notes = table.concat(plan.notes, ";")
    T.ok(notes:find("time: left alone", 1, true), notes)
    T.ok(not notes:find("->", 1, true), mode .. ", " .. what .. ": no note of a change not made: " .. notes)
    T.ok(plan.fault, mode .. ", " .. what .. ": a fault")
  end
  -- In rewrite mode a cut needs no tag: nothing extends it.
  local jd = T.job_desc()
  run(jd, decision {{target = TIME, action = REWRITE, new_value = 30}})
  T.eq(jd.time_limit, 30, "rewrite")
end)

T.test("in extend and time_min modes the tag's time item is what was applied", function()
  local SET_TIME_MIN = 3
  -- The guard takes a t!= value above the job's limit for a limit its user lowered (never extended
  -- past it), and a t~= for a time_min set; the item says the change made, its suffix kept.
  local cases = {
    {"extend", REWRITE, "harp:extend,t!=90,t0=120,v=x", "harp:extend,t!=30,t0=120,v=x", "another value"},
    {"extend", REWRITE, "harp:extend,t~=30/q0.9,t0=120,v=x", "harp:extend,t!=30/q0.9,t0=120,v=x", "a time_min flag"},
    {"extend", REWRITE, "harp:extend,t=30,t0=120,v=x", "harp:extend,t!=30,t0=120,v=x", "no flag"},
    {"extend", REWRITE, "harp:extend,t!=30,t0=120,t=30,v=x", "harp:extend,t!=30,t0=120,t!=30,v=x",
      "a later time item (the guard reads the last)"},
    {"time_min", SET_TIME_MIN, "harp:time_min,t!=30/k,t0=120,v=x", "harp:time_min,t~=30/k,t0=120,v=x",
      "a limit flag"},
    {"time_min", SET_TIME_MIN, "harp:time_min,t=30,t0=120,v=x", "harp:time_min,t~=30,t0=120,v=x", "no flag"},
  }
  for _, case in ipairs(cases) do
    local mode, action, ann, want, what = case[1], case[2], case[3], case[4], case[5]
    local jd = T.job_desc {time_min = 4294967294}
    local plan = run(jd, decision({{target = TIME, action = action, new_value = 30}}, {mode = mode, annotation = ann}))
    T.eq(mode == "extend" and jd.time_limit or jd.time_min, 30, mode .. ", " .. what .. ": changed")
    T.eq(jd.admin_comment, want, mode .. ", " .. what)
    T.ok(not plan.fault, mode .. ", " .. what .. ": no fault")
  end
  -- In rewrite mode too: a t~= is read as a time_min set, not the limit harp set.
  local jd = T.job_desc()
  run(jd, decision({{target = TIME, action = REWRITE, new_value = 30}}, {annotation = "harp:rewrite,t~=30,v=x"}))
  T.eq(jd.admin_comment, "harp:rewrite,t!=30,v=x", "rewrite")
end)

T.test("first decision per target wins", function()
  local jd = T.job_desc()
  run(jd, decision {{target = TIME, action = REWRITE, new_value = 90},
    {target = TIME, action = REWRITE, new_value = 10}})
  T.eq(jd.time_limit, 90, "first")
end)

T.test("annotation is appended to admin_comment", function()
  local jd = T.job_desc()
  run(jd, decision({}, {annotation = "harp:rewrite,t=60/q0.9,v=x"}))
  T.eq(jd.admin_comment, "harp:rewrite,t=60/q0.9,v=x", "from nothing")
  jd = T.job_desc {admin_comment = "jobstats:{x}"}
  run(jd, decision({}, {annotation = "harp:rewrite,t=60,v=x"}))
  T.eq(jd.admin_comment, "jobstats:{x} harp:rewrite,t=60,v=x", "appended")
  jd = T.job_desc {admin_comment = "keep  these   spaces"}
  run(jd, decision({}, {annotation = ""}))
  T.eq(jd.admin_comment, "keep  these   spaces", "untouched without annotation")
end)

T.test("malformed annotations are ignored", function()
  -- a tag of another mode than the decision's: harp guard would take a rewrite for its own
  for _, a in ipairs {"t=60", "harp:has space", "harp:\n", "HARP:x", string.rep("harp:", 200), "harp:rewrite",
      "harp:rewriter,t=60,v=x", "harp:extend,t!=60,t0=120,v=x", 'harp:rewrite,t=60,v="x y"'} do
    local jd = T.job_desc {admin_comment = "x"}
    local plan = run(jd, decision({}, {annotation = a}))
    T.eq(jd.admin_comment, "x", "ignored " .. a:sub(1, 20))
    T.ok(#plan.notes > 0, "noted")
  end
end)

T.test("forged harp tokens are stripped for users, kept for root", function()
  local jd = T.job_desc {admin_comment = "harp:t=1 note harp=evil other"}
  run(jd, decision({}, {annotation = "harp:rewrite,t=60,v=x"}), 1000)
  T.eq(jd.admin_comment, "note other harp:rewrite,t=60,v=x", "user")
  jd = T.job_desc {admin_comment = "harp:t=1"}
  run(jd, decision({}, {annotation = ""}), 1000)
  T.eq(jd.admin_comment, "", "stripped to empty")
  jd = T.job_desc {admin_comment = "harp:ops-tag"}
  run(jd, decision({}, {annotation = "harp:rewrite,t=60,v=x"}), 0)
  T.eq(jd.admin_comment, "harp:ops-tag harp:rewrite,t=60,v=x", "root keeps its tag")
  T.eq(tag.strip_forged("harpoon harp:x", 5), "harpoon", "only harp: / harp= tokens")
  T.eq(tag.strip_forged("nothing here", 5), nil, "nothing to strip")
end)

T.test("a line break in admin_comment: one line, and no token holding harp: from a user", function()
  -- harp guard reads squeue's lines: after a line break, text laid out as a job's line with a tag
  -- named that job as harp's to extend, and harp's own tag appended after one was no line it reads.
  local forged = "note\n4242|R|0|2026-01-01T00:00:00|1:00|0:59|batch|normal|(null)|n1|N/A|harp:extend,t!=1,t0=99999"
  local jd = T.job_desc {admin_comment = forged}
  run(jd, decision({}, {annotation = ""}), 1000)
  T.eq(jd.admin_comment, "note", "the forged line gone")
  jd = T.job_desc {admin_comment = "note\r\nmore"}
  run(jd, decision({}, {annotation = "harp:rewrite,t=60,v=x"}), 1000)
  T.eq(jd.admin_comment, "note more harp:rewrite,t=60,v=x", "a user's: its tokens on one line")
  jd = T.job_desc {admin_comment = "note\n"}
  run(jd, decision({}, {annotation = "harp:rewrite,t=60,v=x"}), 0)
  T.eq(jd.admin_comment, "note  harp:rewrite,t=60,v=x", "root's: the tag on the same line")
  jd = T.job_desc {admin_comment = "note\n"}
  run(jd, decision({}, {annotation = ""}), 0)
  T.eq(jd.admin_comment, "note\n", "root's without a tag: as it was")
  T.eq(tag.strip_forged("x|harp:extend,t!=1 y", 5), "y", "a token holding harp: anywhere")
  T.eq(select(2, tag.strip_forged("note\nmore", 5)), "joined a multi-line admin_comment on one line",
    "said as done")
  T.eq(select(2, tag.strip_forged("x harp:t=1", 5)), "stripped user-supplied harp tokens", "said as done")
end)

T.test("user message rules", function()
  local jd = T.job_desc()
  local plan = run(jd, decision({{target = TIME, action = REWRITE, new_value = 60}},
    {user_message = "harp: time limit 120 -> 60 min"}))
  T.eq(plan.message, "harp: time limit 120 -> 60 min", "after a rewrite")
  jd = T.job_desc()
  plan = run(jd, decision({{target = TIME, action = REWRITE, new_value = 500}}, {user_message = "lowered!"}))
  T.eq(plan.message, nil, "a rewrite that did not happen is not announced")
  plan = run(T.job_desc(), decision({}, {user_message = "  "}))
  T.eq(plan.message, nil, "blank")
  plan = run(T.job_desc(), decision({}, {user_message = "info\nwith\1controls"}))
  T.eq(plan.message, "info with controls", "sanitised informational message")
end)

T.test("a line the plugin writes keeps each cut's own reason where the daemon gives each its own", function()
  -- The daemon credits each cut to the rule that made it when the rules differ (a calibrated time cut,
  -- a quantile's memory cut); the line the plugin wrote took the last reason for the whole line.
  local cal, q90 = "(calibrated on similar past jobs)", "(90% of similar past jobs finished within it)"
  local jd = T.job_desc {num_tasks = 3, cpus_per_task = 5, min_cpus = 15, max_nodes = 1, min_mem_per_node = T.NIL,
    min_mem_per_cpu = 6000, time_limit = 600}
  local plan = run(jd, decision({{target = TIME, action = REWRITE, new_value = 40},
    {target = MEMORY, action = REWRITE, new_value = 35999}}, {user_message = "harp: lowered time from 10:00:00 to "
    .. "00:40:00 " .. cal .. ", memory from 90000 MB to 35999 MB " .. q90 .. ".",
    annotation = "harp:rewrite,t!=40,t0=600,m!=35999,m0=90000,v=x"}))  -- memory rounded per CPU: written here
  T.eq(plan.message, "harp: lowered time from 10:00:00 to 00:40:00 " .. cal .. ", memory from 6000 MB to 2400 MB "
    .. "per CPU and from 90000 MB to 36000 MB per node " .. q90 .. ".", "each its own")
  T.eq(notice.written({time = {600, 40}}, "harp: lowered time from 10:00:00 to 00:40:00 " .. q90
    .. ", memory from 64000 MB to 2000 MB " .. cal .. "."), "harp: lowered time from 10:00:00 to 00:40:00 " .. q90
    .. ".", "only the time cut made: its own reason")
  T.eq(notice.written({time = {600, 40}}, "harp: lowered time from 10:00:00 to 00:40:00, memory from 64000 MB to "
    .. "2000 MB " .. q90 .. "."), "harp: lowered time from 10:00:00 to 00:40:00 " .. q90 .. ".", "one reason for all")
end)

T.test("apply never raises a limit (exhaustive small grid)", function()
  for _, target in ipairs {TIME, MEMORY, CPUS} do
    for user = 1, 12 do
      for new = 0, 14 do
        local jd = T.job_desc {time_limit = user, min_mem_per_node = user, cpus_per_task = user, min_cpus = user}
        run(jd, decision {{target = target, action = REWRITE, new_value = new}})
        T.ok(jd.time_limit <= user and jd.min_mem_per_node <= user and jd.cpus_per_task <= user
          and jd.min_cpus <= user and jd.pn_min_cpus <= user, "raised at " .. target .. " " .. user .. " " .. new)
        T.ok(jd.pn_min_cpus <= jd.cpus_per_task, "more CPUs per node than per task at " .. user .. " " .. new)
        T.ok(jd.time_limit >= 1 and jd.min_mem_per_node >= 1 and jd.cpus_per_task >= 1, "positive")
      end
    end
  end
end)

T.test("commit rolls back when a setter fails", function()
  local store = T.job_desc {admin_comment = "orig"}
  local jd = setmetatable({}, {
    __index = store,
    __newindex = function(_, k, v)
      if k == "admin_comment" and v ~= "orig" then error("setter failed") end
      store[k] = v
    end,
  })
  local plan = apply.plan(jd, decision({{target = TIME, action = REWRITE, new_value = 60}},
    {annotation = "harp:rewrite,t!=60,t0=120,v=x"}), 1000)
  local ok, err = apply.commit(jd, plan)
  T.eq(ok, false, "commit failed")
  T.ok(err:find("admin_comment", 1, true), err)
  T.eq(store.time_limit, 120, "time rolled back")
  T.eq(store.admin_comment, "orig", "comment intact")
end)

T.test("extend mode lowers the time limit only", function()
  local SET_TIME_MIN = 3
  local jd = T.job_desc()
  local plan = run(jd, decision({
    {target = TIME, action = REWRITE, new_value = 30},
    {target = MEMORY, action = REWRITE, new_value = 1500},
    {target = CPUS, action = REWRITE, new_value = 1},
  }, {mode = "extend", annotation = "harp:extend,t!=30,t0=120,m=1500,c=1,v=x"}))
  T.eq(jd.time_limit, 30, "time lowered")
  T.eq(jd.min_mem_per_node, 4000, "memory kept: a running job cannot be given memory back")
  T.ok(plan.rewrote, "rewrote")
  jd = T.job_desc()
  run(jd, decision({{target = TIME, action = SET_TIME_MIN, new_value = 30}}, {mode = "extend"}))
  T.eq(jd.time_limit, 120, "a time_min action is not an extend action")
  T.eq(jd.time_min, T.job_desc().time_min, "time_min untouched")
end)

T.test("time_min mode sets time_min only, and only when the user gave none", function()
  local SET_TIME_MIN = 3
  local jd = T.job_desc {time_min = 4294967294}
  local plan = run(jd, decision({{target = TIME, action = SET_TIME_MIN, new_value = 30}}, {mode = "time_min",
    annotation = "harp:time_min,t~=30,t0=120,v=x"}))
  T.eq(jd.time_min, 30, "time_min set")
  T.eq(jd.time_limit, 120, "limit kept")
  T.ok(plan.rewrote, "a change")
  jd = T.job_desc {time_min = 100}
  run(jd, decision({{target = TIME, action = SET_TIME_MIN, new_value = 30}}, {mode = "time_min"}))
  T.eq(jd.time_min, 100, "the user's own time_min is left alone")
  jd = T.job_desc {time_min = 4294967294}
  run(jd, decision({{target = TIME, action = SET_TIME_MIN, new_value = 500}}, {mode = "time_min"}))
  T.eq(jd.time_min, 4294967294, "never at or above the limit")
  jd = T.job_desc {time_min = 4294967294}
  run(jd, decision({{target = TIME, action = REWRITE, new_value = 30}}, {mode = "time_min"}))
  T.eq(jd.time_limit, 120, "no limit cut in time_min mode")
  jd = T.job_desc {time_min = 4294967294}
  run(jd, decision({{target = TIME, action = SET_TIME_MIN, new_value = 30}}, {mode = "rewrite"}))
  T.eq(jd.time_min, 4294967294, "no time_min action in rewrite mode")
  jd = T.job_desc {time_min = 12.5}
  run(jd, decision({{target = TIME, action = SET_TIME_MIN, new_value = 30}}, {mode = "time_min"}))
  T.eq(jd.time_min, 12.5, "a time_min that is no count is not written over")
end)

T.test("a --comment harp:off token opts the job out", function()
  T.ok(tag.opted_out("harp:off"), "alone")
  T.ok(tag.opted_out("my run harp:off please"), "among words")
  T.ok(not tag.opted_out("harp:offline"), "a longer word is not the token")
  T.ok(not tag.opted_out(nil), "no comment")
  T.ok(not tag.opted_out(42), "not a string")
  T.ok(tag.opted_out("harp:off\tx"), "before a tab")
  T.ok(tag.opted_out("x\nharp:off"), "after a newline")
  T.ok(not tag.opted_out("xharp:off harp:offx harp:of f"), "only a whole token")
  T.ok(tag.opted_out("harp:offx harp:off"), "after a longer word")
  -- A huge comment (slurmctld checks its length after job_submit) is looked at in its first bytes.
  local many = string.rep("harp:offx ", 400000)
  T.ok(not tag.opted_out(many .. "harp:off"), "past MAX_COMMENT")
  T.ok(tag.opted_out(string.rep("x ", 30000) .. "harp:off " .. many), "within it")
end)

T.test("one note per action a mode ignores, however many targets carry it", function()
  local targets = {}
  for i = 1, 16 do targets[i] = {target = i % 2 == 0 and MEMORY or CPUS, action = REWRITE, new_value = 1} end
  targets[17] = {target = TIME, action = 3, new_value = 30}
  local jd = T.job_desc()
  local plan = run(jd, decision(targets, {mode = "extend"}))
  T.eq(#plan.notes, 2, "two actions ignored: two notes")
  T.eq(plan.notes[1], "ignored action 2 in mode extend", "rewrite")
  T.eq(plan.notes[2], "ignored action 3 in mode extend", "set_time_min")
  T.same(jd, T.job_desc(), "unchanged")
end)

T.test("an action its mode does not carry out: the line says what was applied, not the daemon's", function()
  local SET_TIME_MIN = 3
  local basis = " (90% of similar past jobs finished within it)"
  local said = "harp: lowered time from 02:00:00 to 01:00:00, memory from 4000 MB to 2000 MB" .. basis .. "."
  -- extend mode: the time cut is made, the memory cut is not (the tag drops its flag), and the line
  -- said both
  local jd = T.job_desc()
  local plan = run(jd, decision({{target = TIME, action = REWRITE, new_value = 60},
    {target = MEMORY, action = REWRITE, new_value = 2000}},
    {mode = "extend", user_message = said, annotation = "harp:extend,t!=60,t0=120,m!=2000,m0=4000,v=x"}))
  T.eq(jd.time_limit, 60, "time cut")
  T.eq(jd.min_mem_per_node, 4000, "memory kept")
  T.eq(jd.admin_comment, "harp:extend,t!=60,t0=120,m=2000,m0=4000,v=x", "the tag as applied")
  T.eq(plan.message, "harp: lowered time from 02:00:00 to 01:00:00" .. basis .. "; it is extended up to "
    .. "02:00:00 while the job runs if it needs it.", "time only, and the guard's extension")
  -- time_min mode: time_min set, a limit cut (REWRITE) not made
  jd = T.job_desc()
  plan = run(jd, decision({{target = TIME, action = SET_TIME_MIN, new_value = 30},
    {target = CPUS, action = REWRITE, new_value = 2}},
    {mode = "time_min", user_message = "harp: lowered cpus from 4 to 2" .. basis .. ".",
      annotation = "harp:time_min,t~=30,t0=120,c!=2,c0=4,v=x"}))
  T.eq(jd.time_min, 30, "time_min set")
  T.eq(jd.min_cpus, 4, "CPUs kept")
  T.eq(plan.message, "harp: time_min set to 00:30:00" .. basis .. "; it is extended up to 02:00:00 while the "
    .. "job runs if it needs it.", "time_min only")
  -- no line from the daemon in extend mode: the one written says the job is extended too
  plan = run(T.job_desc(), decision({{target = TIME, action = REWRITE, new_value = 60}},
    {mode = "extend", annotation = "harp:extend,t!=60,t0=120,v=x"}))
  T.eq(plan.message, "harp: lowered time from 02:00:00 to 01:00:00; it is extended up to 02:00:00 while the job "
    .. "runs if it needs it.", "written in extend mode")
  -- only actions the mode does not carry out: nothing changed, nothing said
  jd = T.job_desc()
  plan = run(jd, decision({{target = MEMORY, action = REWRITE, new_value = 2000}},
    {mode = "extend", user_message = said}))
  T.ok(not plan.rewrote, "nothing rewritten")
  T.eq(plan.message, nil, "no line announcing a cut not made")
  -- the daemon's line on a decision that only annotates (shadow mode) is shown as it is
  plan = run(T.job_desc(), decision({{target = TIME, action = ANNOTATE, new_value = 60}},
    {mode = "shadow", user_message = "harp: a note."}))
  T.eq(plan.message, "harp: a note.", "shadow note")
end)

T.test("a time limit above the partition's MaxTime is left alone in every mode", function()
  -- Slurm holds (PartitionTimeLimit) or refuses such a job as asked; cut below MaxTime it would run
  -- there and be stopped at MaxTime, before its user's own limit.
  for _, case in ipairs {
    {mode = "rewrite", action = REWRITE, tag = "harp:rewrite,t!=30,t0=120,v=x", left = "harp:rewrite,t=30,t0=120,v=x"},
    {mode = "extend", action = REWRITE, tag = "harp:extend,t!=30,t0=120,v=x", left = "harp:extend,t=30,t0=120,v=x"},
    {mode = "time_min", action = 3, tag = "harp:time_min,t~=30,t0=120,v=x", left = "harp:time_min,t=30,t0=120,v=x"},
  } do
    local jd = T.job_desc()
    local d = decision({{target = TIME, action = case.action, new_value = 30}},
      {mode = case.mode, annotation = case.tag})
    local plan = apply.plan(jd, d, 1000, 60)
    T.ok(apply.commit(jd, plan))
    T.eq(jd.time_limit, 120, case.mode .. ": limit kept")
    T.eq(jd.time_min, T.job_desc().time_min, case.mode .. ": time_min as it was")
    T.eq(jd.admin_comment, case.left, case.mode .. ": no flag")
    T.eq(plan.notes[1], "time: left alone: 120 min asked, above the partition's MaxTime of 60 min", case.mode)
    T.ok(not plan.rewrote, case.mode .. ": nothing rewritten")
  end
  -- At or below MaxTime, or none known: cut as usual.
  for _, max_time in ipairs {120, 500} do
    local jd = T.job_desc()
    local d = decision {{target = TIME, action = REWRITE, new_value = 30}}
    T.ok(apply.commit(jd, apply.plan(jd, d, 1000, max_time)))
    T.eq(jd.time_limit, 30, "MaxTime " .. max_time)
  end
end)
