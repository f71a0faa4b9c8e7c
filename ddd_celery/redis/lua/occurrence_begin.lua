-- Begin the occurrences due at one instant: for each, take its lock, write its checkpoint and
-- claim its run state, as RedisLock, RedisJobCheckpoints and RedisJobRunState would one by one;
-- then release the leases no beat can still want. One round trip for the whole batch.
--
-- Keys (N occurrences, then R leases)
--   KEYS[3i-2]  the lock key of occurrence i, `<lock prefix>job:<name>:<instant>` (see
--               release.lua); any key name when it takes no lock (never read).
--   KEYS[3i-1]  its run state, `<prefix><job>` (see run_claim.lua).
--   KEYS[3i]    its checkpoint, `<prefix><job>` (see checkpoint_write.lua); any key name
--               when no checkpoint is kept (never read).
--   KEYS[3N+j]  the lock key of lease j to release.
-- Arguments
--   ARGV[1], ARGV[2]  N and R.
--   ARGV[3+7(i-1) ..]  for occurrence i: the owner token of its lease; the lock's time to
--               live in ms ('0': no lock); '1' to claim the run state; the occurrence in
--               epoch ms; '1' to queue it behind a run in progress; the run's time to live in
--               ms; '1' to write the checkpoint.
--   ARGV[3+7N+j-1]  the owner token of lease j.
-- Returns
--   N answers, 'held' (another owner holds the lock: nothing else done), 'taken' (locked or
--   no lock needed; no claim asked), or the claim: 'started', 'queued', 'busy'; then R
--   numbers, 1 when lease j was released, 0 when it had expired or changed owner.
local n, r = tonumber(ARGV[1]), tonumber(ARGV[2])
local answers = {}
for i = 0, n - 1 do
  local a = 2 + 7 * i
  local token, lock_ttl, claim, at = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local queue, run_ttl, checkpoint = ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
  local lock_key, run_key, checkpoint_key = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  local answer = 'taken'
  if lock_ttl ~= '0' and not redis.call('SET', lock_key, token, 'NX', 'PX', lock_ttl) then
    answer = 'held'
  else
    if checkpoint == '1' then
      local current = redis.call('GET', checkpoint_key)
      if not current or tonumber(current) < tonumber(at) then
        redis.call('SET', checkpoint_key, at)
      end
    end
    if claim == '1' then
      if redis.call('EXISTS', run_key) == 0 then
        redis.call('HSET', run_key, 'running', at)
        redis.call('PEXPIRE', run_key, run_ttl)
        answer = 'started'
      elseif queue == '1' and redis.call('HSETNX', run_key, 'queued', at) == 1 then
        answer = 'queued'
      else
        answer = 'busy'
      end
    end
  end
  answers[#answers + 1] = answer
end
for j = 1, r do
  local key = KEYS[3 * n + j]
  if redis.call('GET', key) == ARGV[2 + 7 * n + j] then
    redis.call('DEL', key)
    answers[#answers + 1] = 1
  else
    answers[#answers + 1] = 0
  end
end
return answers
