-- Hand back up to `limit` running jobs whose lease expired (their worker died).
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P leases, running jobs by lease expiry.
--   Also P job:<id> of each job (status, run_at, last_error_code, last_error_type,
--   finished_at when dead; the lease fields deleted, the lease noted as expired), P pending
--   and P queue:<queue> (entered when failed), P finished:dead (entered when dead),
--   P list:status:<status>, P stats and P stats:name; the attempt ends, interrupted with the
--   error, in its history.
-- Arguments
--   ARGV[2]  now, epoch ms: a lease that expired strictly before it is handed back.
--   ARGV[3]  how many jobs at most.
--   ARGV[4]  the error code and ARGV[5] the error type recorded (an interrupted attempt).
-- Returns
--   a list of two: the hashes (HGETALL) of the jobs handed back, failed due now, or dead when
--   their attempts are exhausted; and how many entries of P leases named a job whose hash is
--   gone (dropped, not an error).
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2], 'LIMIT', 0, ARGV[3])
local expired = {}
local dropped = 0
for _, id in ipairs(ids) do
  local job = read_job(id)
  if job and job.status == 'running' then
    redis.call('HSET', job_key(id), 'last_error_code', ARGV[4], 'last_error_type', ARGV[5])
    if job.attempts >= job.max_attempts then
      finish(job, 'dead', ARGV[2], 'expire', ARGV[4], ARGV[5])
    else
      unindex(job)
      drop_lease(job, 'expire', ARGV[2], ARGV[4], ARGV[5])
      move(job, 'failed')
      make_claimable(job, ARGV[2])
    end
    expired[#expired + 1] = redis.call('HGETALL', job_key(id))
  else
    if not job then
      dropped = dropped + 1
    end
    redis.call('ZREM', KEYS[1], id)
  end
end
return {expired, dropped}
