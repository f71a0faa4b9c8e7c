-- Save a running attempt's progress and/or checkpoint, when its lease is still the job's.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the job's hash (progress, checkpoint: JSON).
-- Arguments
--   ARGV[2]  the job id.
--   ARGV[3]  the lease's token.
--   ARGV[4]  '1' to set progress to ARGV[5] (JSON), '0' to leave it.
--   ARGV[6]  '1' to set checkpoint to ARGV[7] (JSON), '0' to leave it.
-- Returns
--   1 when saved; 0 when the lease is lost (nothing changes).
if not leased(ARGV[2], ARGV[3]) then
  return 0
end
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'progress', ARGV[5])
end
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[1], 'checkpoint', ARGV[7])
end
return 1
