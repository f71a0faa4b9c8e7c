-- Give a running job back, queued and due now, its attempt not counted (a worker stopping).
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the job's hash (status, run_at, attempts; the lease fields deleted).
--   Also P leases (left), P pending and P queue:<queue> (entered), P list:status:<status>,
--   P stats and P stats:name; the attempt ends, released, in its history.
-- Arguments
--   ARGV[2]  the job id.
--   ARGV[3]  the lease's token.
--   ARGV[4]  now, epoch ms: the job's run_at.
-- Returns
--   1 when done, or already released by this lease and not claimed since (sent twice); 0 when
--   the lease is lost (nothing changes).
local job = leased(ARGV[2], ARGV[3])
if not job then
  return concluded(ARGV[2], ARGV[3], 'release') and 1 or 0
end
unindex(job)
drop_lease(job, 'release', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'attempts', -1)
move(job, 'queued')
make_claimable(job, ARGV[4])
return 1
