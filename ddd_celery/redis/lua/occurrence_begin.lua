-- Begin the occurrences due at one instant: for each, take its lock, write its checkpoint and
-- claim its run state, as RedisLock, RedisJobCheckpoints and RedisJobRunState would one by one;
-- then release the leases no beat can still want. One round trip for the whole batch. Each
-- rule is occurrence_lib.lua's (lock_take, checkpoint_write, run_claim, lock_release),
-- prepended to this script.
--
-- The batch comes as one JSON argument and each key is built here from its prefix, as the job
-- store's scripts build theirs: a batch is a handful of arguments to pack, not ten per
-- occurrence, and the answer is one JSON text to decode, not one reply per occurrence.
--
-- Sent again with the same arguments (redis-py re-sends a script on a new connection after a
-- socket timeout, its first reply lost), it answers as the first did: a lock that already holds
-- the occurrence's own token is this begin's, not another owner's, and a run state started or
-- queued under that token answers 'started' or 'queued' again, changing nothing.
--
-- Keys
--   KEYS[1]  the run states' prefix, never read: it routes the call to the prefixes' slot on a
--            Redis Cluster (ddd_celery/redis/slots.py)
--   KEYS[2..] with ARGV[8] '1': each occurrence's lock, in order (every one takes a lock and
--            none names its token)
--   and, built here: the lock `<ARGV[1]>job:<name>:<instant>`, the run state
--   `<ARGV[2]><job>`, the checkpoint `<ARGV[3]><job>` (see occurrence_lib.lua); a prefix with
--   a hash tag keeps them in one Redis Cluster slot.
-- Arguments
--   ARGV[1..3]  the prefixes of the locks, the run states and the checkpoints.
--   ARGV[4]  '1' to write each occurrence's checkpoint (else none is kept: ARGV[3] unused).
--   ARGV[5]  the owner tokens' stem: occurrence i's token is ARGV[5] followed by i (from 1),
--            unless the occurrence names its own.
--   ARGV[6]  the occurrences, a JSON array of `[job, lock key, lock ttl ms, claim, instant,
--            queue, run ttl ms(, token)]`: the lock key after its prefix ('' with a ttl of 0:
--            no lock), claim and queue 0 or 1, the instant in epoch ms as a string (written as
--            is), the owner token when the caller chose it (a begin it repeats).
--   ARGV[7]  the leases to release, a JSON array of `[lock key after its prefix, token]`.
--   ARGV[8]  '1' when KEYS[2..] are the occurrences' locks, else '0'.
-- Returns
--   a JSON array: for each occurrence 'held' (another owner holds the lock: nothing else
--   done), 'taken' (locked or no lock needed; no claim asked), or the claim: 'started',
--   'queued', 'busy'; then for each lease 1 when released, 0 when it had expired or changed
--   owner.
-- Each claim is made with its occurrence's token, which the run state keeps (`running_by`,
-- `queued_by`): a claim is known again by its token, not by its instant.
local lock_prefix, run_prefix, checkpoint_prefix = ARGV[1], ARGV[2], ARGV[3]
local checkpoint, stem = ARGV[4] == '1', ARGV[5]
local leases = cjson.decode(ARGV[7])
-- Every lock is read first, in one MGET: in a burst shared by several beats, most occurrences a
-- beat asks for are another's, each then answered 'held' without a SET and a GET of its own,
-- as lock_take would answer. Only a free lock is taken (lock_take); one that holds this
-- occurrence's token is this begin's first send's. When the locks come as KEYS and another
-- owner holds every one (no holder's token has this script's stem), the batch is all 'held'
-- and its occurrences are not even decoded: what every beat but the first pays for a batch.
local lock_keys, holders, all_held = {}, {}, false
if ARGV[8] == '1' then
  local values = redis.call('MGET', unpack(KEYS, 2))
  all_held = true
  for i = 1, #values do
    lock_keys[i] = KEYS[i + 1]
    holders[lock_keys[i]] = values[i]
    all_held = all_held and values[i] and string.find(values[i], stem, 1, true) ~= 1
  end
end
local answers = {}
if all_held then
  for i = 1, #lock_keys do
    answers[i] = '"held"'
  end
end
local occurrences = all_held and {} or cjson.decode(ARGV[6])
if ARGV[8] ~= '1' then
  local keys = {}
  for i = 1, #occurrences do
    if occurrences[i][3] ~= 0 then
      lock_keys[i] = lock_prefix .. occurrences[i][2]
      keys[#keys + 1] = lock_keys[i]
    end
  end
  if #keys > 0 then
    local values = redis.call('MGET', unpack(keys))
    for j = 1, #keys do
      holders[keys[j]] = values[j]
    end
  end
end
for i = 1, #occurrences do
  local occurrence = occurrences[i]
  local job, claim = occurrence[1], occurrence[4]
  local at, queue, run_ttl = occurrence[5], occurrence[6], occurrence[7]
  local token = occurrence[8]
  if type(token) ~= 'string' then
    token = stem .. i
  end
  local answer = '"taken"'
  local lock_key = lock_keys[i]
  local held = false
  if lock_key then
    local holder = holders[lock_key]
    if not holder then -- free when read: lock_take still sees a take earlier in this batch
      held = not lock_take(lock_key, token, occurrence[3])
    else
      held = holder ~= token
    end
  end
  if held then
    answer = '"held"'
  else
    if checkpoint then
      checkpoint_write(checkpoint_prefix .. job, at)
    end
    if claim == 1 then
      answer = '"' .. run_claim(run_prefix .. job, at, queue == 1, run_ttl, token) .. '"'
    end
  end
  answers[i] = answer
end
for j = 1, #leases do
  answers[#answers + 1] = tostring(lock_release(lock_prefix .. leases[j][1], leases[j][2]))
end
return '[' .. table.concat(answers, ',') .. ']'
