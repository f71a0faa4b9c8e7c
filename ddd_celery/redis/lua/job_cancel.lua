-- Cancel a queued, failed or running job of the caller's tenant.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the job's hash (status, finished_at; the lease fields deleted, so the
--            worker running it loses its lease).
--   Also P pending, P dispatched, P queue:<queue>, P leases (left), P finished:cancelled
--   (entered), P list:status:<status>, P stats and P stats:name; a running attempt ends,
--   cancelled, in its history.
-- Arguments
--   ARGV[2]  the job id.
--   ARGV[3]  '=<tenant>' for the caller's tenant ('=' for none), '*' for every job.
--   ARGV[4]  now, epoch ms: the job's finished_at.
-- Returns
--   1 when the job is cancelled after the call (cancelled now, or already: a cancel sent twice
--   answers as once); 0 when unknown, another tenant's, succeeded or dead.
local job = read_job(ARGV[2])
if not job or not reaches(job, ARGV[3]) then
  return 0
end
if job.status == 'cancelled' then
  return 1
end
if not (claimable(job) or job.status == 'running') then
  return 0
end
finish(job, 'cancelled', ARGV[4], 'cancel')
return 1
