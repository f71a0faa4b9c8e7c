-- Claim up to `limit` due jobs of some queues, earliest run_at first (a polling worker).
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1..n]  P queue:<queue> of each queue, zsets of its claimable jobs by run_at.
--   Also P job:<id> of each job claimed, P pending, P dispatched, P leases, P status:<status>
--   and P stats.
-- Arguments
--   ARGV[2]  now, epoch ms: jobs whose run_at is not after it are due.
--   ARGV[3]  the leases' expiry, epoch ms.
--   ARGV[4]  how many jobs at most.
--   ARGV[5]  the leases' token stem: job i's lease is `<stem>:<i>`.
-- Returns
--   the records of the jobs claimed (each a JSON object, see claim in job_lib.lua), in the
--   order of their run_at.
local limit = tonumber(ARGV[4])
local due = {}
for _, queue in ipairs(KEYS) do
  local found = redis.call('ZRANGEBYSCORE', queue, '-inf', ARGV[2], 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #found, 2 do
    due[#due + 1] = {id = found[i], run_at = tonumber(found[i + 1])}
  end
end
table.sort(due, function(a, b)
  if a.run_at == b.run_at then
    return a.id < b.id
  end
  return a.run_at < b.run_at
end)
local claimed = {}
for _, entry in ipairs(due) do
  if #claimed >= limit then
    break
  end
  local job, record = read_record(entry.id)
  if job and claimable(job) then
    claimed[#claimed + 1] = claim(job, record, ARGV[5] .. ':' .. #claimed, ARGV[3])
  end
end
return claimed
