-- Claim one job for an attempt (a Celery message naming it), when it is claimable and due.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the job's hash.
--   Also P pending, P dispatched, P queue:<queue> (left), P leases (entered),
--   P list:status:<status>, P stats and P stats:name.
-- Arguments
--   ARGV[2]  the job id.
--   ARGV[3]  now, epoch ms.
--   ARGV[4]  the lease's token (the caller's, or random and new for this call).
--   ARGV[5]  the lease's expiry, epoch ms.
--   ARGV[6]  the worker claiming: '=<worker>', or '' for none named (its history's attempt).
-- Returns
--   the job's record after the claim (a JSON object, see claim in job_lib.lua), its attempts
--   counting this one and its history a new attempt; the same lease again, its expiry ARGV[5], when the job already runs
--   under that token (the claim sent twice: redis-py sends a script again after a timeout);
--   or nil, changing nothing, when the job is unknown, not due, running or finished, or when
--   its last lease, ended, was this token.
local job, record = read_record(ARGV[2])
if not job then
  return false
end
if job.status == 'running' and job.lease_token == ARGV[4] then
  return claim_again(job, record, ARGV[5])
end
-- a token names one attempt: one whose lease ended never claims the job again
if not claimable(job) or job.run_at > tonumber(ARGV[3]) or record.last_lease_token == ARGV[4] then
  return false
end
return claim(job, record, ARGV[3], ARGV[6], ARGV[4], ARGV[5])
