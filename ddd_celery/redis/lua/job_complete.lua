-- End a running attempt that succeeded: the job is succeeded, when the lease is still its.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the job's hash (status, finished_at; the lease fields and the last
--            error are deleted: a succeeded job keeps no error of an earlier attempt).
--   Also P leases (left), P finished:succeeded (entered), P list:status:<status>, P stats and
--   P stats:name; the attempt ends, succeeded, in its history.
-- Arguments
--   ARGV[2]  the job id.
--   ARGV[3]  the lease's token.
--   ARGV[4]  now, epoch ms: the job's finished_at.
-- Returns
--   1 when done, or already done by this lease (sent twice); 0 when the lease is lost
--   (nothing changes).
local job = leased(ARGV[2], ARGV[3])
if not job then
  return concluded(ARGV[2], ARGV[3], 'complete') and 1 or 0
end
redis.call('HDEL', KEYS[1], 'last_error_code', 'last_error_type')
finish(job, 'succeeded', ARGV[4], 'complete')
return 1
