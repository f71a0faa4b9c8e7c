-- End a running attempt that succeeded: the job is succeeded, when the lease is still its.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the job's hash (status, finished_at; the lease fields are deleted).
--   Also P leases (left), P finished (entered), P status:<status> and P stats.
-- Arguments
--   ARGV[2]  the job id.
--   ARGV[3]  the lease's token.
--   ARGV[4]  now, epoch ms: the job's finished_at.
-- Returns
--   1 when done; 0 when the lease is lost (nothing changes).
local job = leased(ARGV[2], ARGV[3])
if not job then
  return 0
end
finish(job, 'succeeded', ARGV[4])
return 1
