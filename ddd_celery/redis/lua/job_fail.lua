-- End a running attempt that failed: failed until its retry, or dead when there is none.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the job's hash (status, run_at, last_error_code, last_error_type,
--            finished_at when dead; the lease fields are deleted).
--   Also P leases (left), P pending and P queue:<queue> (entered when retried), P finished:dead
--   (entered when dead), P list:status:<status>, P stats and P stats:name; the attempt ends,
--   failed with the error, in its history.
-- Arguments
--   ARGV[2]  the job id.
--   ARGV[3]  the lease's token.
--   ARGV[4]  now, epoch ms.
--   ARGV[5]  the error code; ARGV[6] the error type.
--   ARGV[7]  the retry's instant, epoch ms, or '' for none (the job is dead).
-- Returns
--   1 when done, or already failed by this lease (sent twice); 0 when the lease is lost
--   (nothing changes).
local job = leased(ARGV[2], ARGV[3])
if not job then
  return concluded(ARGV[2], ARGV[3], 'fail') and 1 or 0
end
redis.call('HSET', KEYS[1], 'last_error_code', ARGV[5], 'last_error_type', ARGV[6])
if ARGV[7] == '' then
  finish(job, 'dead', ARGV[4], 'fail', ARGV[5], ARGV[6])
  return 1
end
unindex(job)
drop_lease(job, 'fail', ARGV[4], ARGV[5], ARGV[6])
move(job, 'failed')
make_claimable(job, ARGV[7])
return 1
