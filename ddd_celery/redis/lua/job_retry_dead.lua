-- Queue a dead job of the caller's tenant again, due now, its attempts reset.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the job's hash (status, run_at, attempts; finished_at deleted).
--   Also P finished:dead (left), P pending and P queue:<queue> (entered: the relay publishes
--   it), P list:status:<status>, P stats and P stats:name.
-- Arguments
--   ARGV[2]  the job id.
--   ARGV[3]  '=<tenant>' for the caller's tenant ('=' for none), '*' for every job.
--   ARGV[4]  now, epoch ms: the job's run_at.
-- Returns
--   1 when queued again; 0 when unknown, another tenant's, or not dead.
local job = read_job(ARGV[2])
if not job or not reaches(job, ARGV[3]) or job.status ~= 'dead' then
  return 0
end
redis.call('HDEL', KEYS[1], 'finished_at')
redis.call('HSET', KEYS[1], 'attempts', 0)
move(job, 'queued')
make_claimable(job, ARGV[4])
return 1
