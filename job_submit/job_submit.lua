--[[
slurm-ml job_submit shim (Lua 5.1, Slurm job_submit/lua).

Forwards each submission as one JSON line over a Unix socket to `slurm-ml submitd`
and applies the rewrite it answers, or rejects the job with its message. Policy lives
in Python (slurm_ml/policy/admission/decision.py); this file only carries fields both ways.

It fails open: if submitd is down, slow (over TIMEOUT_MS in total), answers garbage,
or this script itself errors, the job is accepted unchanged and slurmctld.log says
why. With AUTH_KEY_PATH set, an answer counts only if it carries the key in that file
(readable by SlurmUser and submitd alone): whatever else answers on the socket path is
never applied, and the job is accepted unchanged. After BREAKER_FAILURES failures in a row it stops asking for BREAKER_COOLDOWN_S
seconds, so a dead submitd costs nothing.

Needs Debian packages lua-socket and lua-cjson. Install as job_submit.lua next to
slurm.conf with JobSubmitPlugins=lua; `slurm-ml` rewrites the settings block below
when it installs the file.
--]]

-- settings (slurm-ml rewrites these lines on install) -------------------------------
local SOCKET_PATH = "/run/slurm-ml/submitd.sock"
local AUTH_KEY_PATH = ""
local TIMEOUT_MS = 200
local BREAKER_FAILURES = 3
local BREAKER_COOLDOWN_S = 30
-- end settings ----------------------------------------------------------------------

local PROTOCOL = 1
local NO_VAL = 4294967294
local NO_VAL16 = 65534

-- job_desc fields sent to submitd (slurm_ml/submitd/wire.py JOB_FIELDS)
local JOB_FIELDS = {
  "user_name", "user_id", "account", "partition", "qos",
  "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "gres",
  "features", "min_nodes", "max_nodes", "num_tasks", "ntasks_per_node",
  "time_limit", "time_min", "requeue", "name", "comment", "array_inx",
  "het_job_offset", "shared", "req_switch", "wait4switch", "job_id",
  -- CPUs and memory: what decides whether a node can hold the job besides its GPUs
  -- (job_submit_lua.c shows pn_min_memory as min_mem_per_node, or min_mem_per_cpu
  -- when the MEM_PER_CPU bit is set; wire.py drops the NO_VAL64 it may carry)
  "cpus_per_task", "cpus_per_tres", "min_cpus", "pn_min_cpus", "min_mem_per_node",
  "min_mem_per_cpu", "mem_per_tres", "ntasks_per_tres",
}
-- an update touching one of these is re-checked (wire.py SHAPE_FIELDS)
local SHAPE_FIELDS = {
  "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "gres",
  "features", "min_nodes", "max_nodes", "num_tasks", "ntasks_per_node", "time_min",
}
-- an update naming one of these, even empty (QOS= asks for the default), is judged by
-- budget routing as a submission would be (wire.py ROUTE_FIELDS). A job's owner may
-- change QOS, Account and Partition while the job pends: slurmctld's _update_job
-- (job_mgr.c, 22.05 and 24.11) calls slurm_job_modify first, then checks each against
-- the association and answers ESLURM_JOB_NOT_PENDING for a job that is not pending.
local ROUTE_FIELDS = { "qos", "account", "partition" }

local have_libs, socket, unix, cjson = pcall(function()
  local s = require("socket")
  local u = require("socket.unix")
  local j = require("cjson")
  -- luasocket 3.0 exposes unix.stream(); older builds make the module itself callable
  if type(u) == "table" and u.stream then u = u.stream end
  return s, u, j
end)
if not have_libs then
  slurm.log_error("slurm-ml: lua-socket/lua-cjson missing (%s); all jobs pass unchanged",
                  tostring(socket))
end

local failures = 0
local open_until = 0

local function now()
  return socket.gettime()
end

local function keep(out, key, value)
  if value ~= nil and value ~= NO_VAL and value ~= NO_VAL16 then
    local kind = type(value)
    if kind == "string" or kind == "number" or kind == "boolean" then out[key] = value end
  end
end

-- All fields in one protected pass; if this Slurm lacks one, field by field.
local function read_fields(src)
  local out = {}
  local ok = pcall(function()
    for _, key in ipairs(JOB_FIELDS) do keep(out, key, src[key]) end
  end)
  if not ok then
    out = {}
    for _, key in ipairs(JOB_FIELDS) do
      local got, value = pcall(function() return src[key] end)
      if got then keep(out, key, value) end
    end
  end
  return out
end

-- The connection to submitd stays open across submissions (slurmctld runs this script
-- under one lock, one call at a time); it is dropped after any error, so a late reply
-- can never be read as the answer to the next job.
local conn = nil
local conn_key = nil  -- the reply key read when conn was opened

local function drop()
  if conn then conn:close() end
  conn = nil
end

-- submitd's reply key, read at each new connection (submitd makes it on its first
-- start, which may come after slurmctld's); nil when no key is set up.
local function reply_key()
  if AUTH_KEY_PATH == "" then return nil end
  local fh, err = io.open(AUTH_KEY_PATH, "r")
  if not fh then error("cannot read the reply key: " .. tostring(err), 0) end
  local text = fh:read("*a") or ""
  fh:close()
  local key = text:match("^%s*(%x+)%s*$")
  if not key or #key ~= 64 then
    error("the reply key " .. AUTH_KEY_PATH .. " is not 64 hex digits", 0)
  end
  return key
end

-- One request/reply exchange within the total deadline; returns reply or nil, why.
local function ask(request)
  local deadline = now() + TIMEOUT_MS / 1000
  local line = cjson.encode(request) .. "\n"
  local function left()
    local t = deadline - now()
    if t <= 0 then error("no answer within " .. TIMEOUT_MS .. " ms", 0) end
    conn:settimeout(t)
  end
  for attempt = 1, 2 do
    local reused = conn ~= nil
    local ok, result = pcall(function()
      if not conn then
        conn_key = reply_key()
        conn = unix()
        left()
        local _, err = conn:connect(SOCKET_PATH)
        if err then error("connect " .. SOCKET_PATH .. ": " .. err, 0) end
      end
      left()
      local _, serr = conn:send(line)
      if serr then error("send: " .. serr, 0) end
      left()
      local reply, rerr = conn:receive("*l")
      if rerr == "timeout" then error("no answer within " .. TIMEOUT_MS .. " ms", 0) end
      if not reply then error("receive: " .. tostring(rerr), 0) end
      return cjson.decode(reply)
    end)
    if ok then
      if type(result) ~= "table" then
        drop()
        return nil, "reply is not a JSON object"
      end
      if conn_key ~= nil and result.auth ~= conn_key then
        drop()
        return nil, "the answer on " .. SOCKET_PATH .. " does not carry submitd's reply " ..
                    "key (" .. AUTH_KEY_PATH .. "): not applied"
      end
      return result
    end
    drop()
    -- A kept connection may have been closed by a submitd restart: retry once, fresh.
    local why = tostring(result)
    if not reused or why:find("no answer within", 1, true) then return nil, why end
  end
  return nil, "submitd closed the connection twice"
end

local function breaker_open(who)
  if failures >= BREAKER_FAILURES and now() < open_until then
    slurm.log_info("slurm-ml: %s accepted unchanged: submitd skipped for %.0f s more " ..
                   "after %d failures", who, open_until - now(), failures)
    return true
  end
  return false
end

local function note_failure(who, why)
  failures = failures + 1
  if failures >= BREAKER_FAILURES then
    open_until = now() + BREAKER_COOLDOWN_S
  end
  slurm.log_error("slurm-ml: %s accepted unchanged: %s (failure %d)", who, why, failures)
end

local function apply(job_desc, changes)
  for key, value in pairs(changes) do
    if value == cjson.null then value = "" end
    job_desc[key] = value
  end
end

-- Ask submitd and act on the answer; every failure path accepts the job unchanged.
-- tell_user=false for updates: 22.05 drops log_user() messages in slurm_job_modify
-- (and logs an error for each), so those go to slurmctld.log only.
local function consult(request, job_desc, who, tell_user)
  if not have_libs or breaker_open(who) then return slurm.SUCCESS end
  local reply, why = ask(request)
  if not reply then
    note_failure(who, why)
    return slurm.SUCCESS
  end
  failures = 0
  local message = reply.message
  local has_message = type(message) == "string" and message ~= ""
  if reply.action == "reject" then
    if has_message and tell_user then slurm.log_user("%s", message) end
    slurm.log_info("slurm-ml: %s rejected: %s", who, tostring(message))
    local code = tonumber(reply.code)
    if code == nil or code == 0 then code = slurm.ERROR end
    return code
  end
  if reply.action ~= "accept" then
    slurm.log_error("slurm-ml: %s accepted unchanged: submitd says %s: %s", who,
                    tostring(reply.action), tostring(reply.error))
    return slurm.SUCCESS
  end
  if type(reply.set) == "table" then
    local ok, err = pcall(apply, job_desc, reply.set)
    if not ok then
      slurm.log_error("slurm-ml: %s: could not apply the rewrite: %s", who, tostring(err))
    end
  end
  if has_message then
    if tell_user then
      slurm.log_user("%s", message)
    else
      slurm.log_info("slurm-ml: %s: %s", who, message)
    end
  end
  return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local ok, rc = pcall(function()
    local job = read_fields(job_desc)
    local who = "job of " .. tostring(job.user_name or submit_uid)
    return consult({v = PROTOCOL, op = "submit", uid = submit_uid, job = job}, job_desc, who,
                   true)
  end)
  if not ok then
    slurm.log_error("slurm-ml: job accepted unchanged: shim error: %s", tostring(rc))
    return slurm.SUCCESS
  end
  return rc
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local ok, rc = pcall(function()
    if modify_uid == 0 then return slurm.SUCCESS end  -- root's updates are deliberate
    local update = read_fields(job_desc)
    local touches = false
    for _, key in ipairs(SHAPE_FIELDS) do
      if update[key] ~= nil and update[key] ~= "" then touches = true end
    end
    for _, key in ipairs(ROUTE_FIELDS) do
      if update[key] ~= nil then touches = true end
    end
    if not touches then return slurm.SUCCESS end
    local current = read_fields(job_rec)
    -- Its AdminComment tells submitd whether admission routed the job (the record an
    -- update cannot write); always sent, "" for none, so that none reads as none.
    local got, record = pcall(function() return job_rec.admin_comment end)
    current.admin_comment = (got and type(record) == "string") and record or ""
    local who = "update of job " .. tostring(current.job_id)
    return consult({v = PROTOCOL, op = "modify", uid = modify_uid, job = update,
                    current = current}, job_desc, who, false)
  end)
  if not ok then
    slurm.log_error("slurm-ml: update accepted unchanged: shim error: %s", tostring(rc))
    return slurm.SUCCESS
  end
  return rc
end

slurm.log_info("slurm-ml: job_submit shim loaded (socket %s, timeout %d ms)", SOCKET_PATH,
               TIMEOUT_MS)
return slurm.SUCCESS
