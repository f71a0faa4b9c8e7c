-- Claim up to `limit` due jobs of some queues, earliest run_at first (a polling worker).
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]     P claimed:<token>, the ids this call claimed (answered again when it is sent
--               twice).
--   KEYS[2..n]  P queue:<queue> of each queue, zsets of its claimable jobs by run_at.
--   Also P job:<id> of each job claimed, P pending, P dispatched, P leases,
--   P list:status:<status>, P stats and P stats:name.
-- Arguments
--   ARGV[2]  now, epoch ms: jobs whose run_at is not after it are due.
--   ARGV[3]  the leases' expiry, epoch ms.
--   ARGV[4]  how many jobs at most.
--   ARGV[5]  the call's token: job i's lease (from 0) is `<token>:<i>`.
--   ARGV[6]  how long P claimed:<token> is kept, ms (the lease's length).
--   ARGV[7]  the worker claiming: '=<worker>', or '' for none named (its history's attempts).
-- Returns
--   a list of two: the records of the jobs claimed (each a JSON object, see claim in
--   job_lib.lua), in the order of their run_at; and how many index entries named a job whose
--   hash is gone (dropped). Sent twice (same token), the jobs the first claimed that still run
--   under its leases, their expiry ARGV[3], and nothing more claimed.
local claimed = {}
local earlier = redis.call('LRANGE', KEYS[1], 0, -1)
if #earlier > 0 then
  for i, id in ipairs(earlier) do
    local job, record = read_record(id)
    if job and job.status == 'running' and job.lease_token == ARGV[5] .. ':' .. (i - 1) then
      claimed[#claimed + 1] = claim_again(job, record, ARGV[3])
    end
  end
  return {claimed, 0}
end
local limit = tonumber(ARGV[4])
local ids = {}
local dropped = 0
-- Rounds: the due entries of every queue, earliest first; a round that met entries of
-- vanished jobs (dropped from their index) is followed by another, so they take no place.
local round_dropped = 1
while round_dropped > 0 and #claimed < limit do
  round_dropped = 0
  local due = {}
  for k = 2, #KEYS do
    local found = redis.call('ZRANGEBYSCORE', KEYS[k], '-inf', ARGV[2], 'WITHSCORES', 'LIMIT', 0,
      limit - #claimed)
    for i = 1, #found, 2 do
      due[#due + 1] = {id = found[i], run_at = tonumber(found[i + 1]), index = KEYS[k]}
    end
  end
  table.sort(due, function(a, b)
    if a.run_at == b.run_at then
      return a.id < b.id
    end
    return a.run_at < b.run_at
  end)
  for _, entry in ipairs(due) do
    if #claimed >= limit then
      break
    end
    local job, record = read_record(entry.id)
    if job and claimable(job) then
      claimed[#claimed + 1] = claim(job, record, ARGV[2], ARGV[7], ARGV[5] .. ':' .. #claimed,
        ARGV[3])
      ids[#ids + 1] = entry.id
    elseif not job then
      redis.call('ZREM', entry.index, entry.id)
      round_dropped = round_dropped + 1
    end
  end
  dropped = dropped + round_dropped
end
push_all(KEYS[1], ids, ARGV[6])
return {claimed, dropped}
