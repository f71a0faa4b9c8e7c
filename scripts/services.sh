#!/usr/bin/env bash
# Sourced by ./dev test: make sure the Redis and the PostgreSQL the tests talk to answer, starting
# (and if need be installing) a local redis-server or PostgreSQL cluster when they do not. The
# process tests also start private redis-server instances of their own, so the binary must exist.
set -euo pipefail

redis_url="${REDIS_URL:-redis://127.0.0.1:6379/0}"
export REDIS_URL="$redis_url"

redis_answers() {
  python - "$redis_url" <<'PY'
import sys, redis
try:
    redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()
except Exception:
    sys.exit(1)
PY
}

if ! command -v redis-server >/dev/null 2>&1; then
  echo "==> installing redis-server (the process tests start private instances)"
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    echo "redis-server is missing and apt-get is not available: install Redis 6 or newer" >&2
    exit 1
  fi
fi

if ! redis_answers; then
  case "$redis_url" in
    redis://127.0.0.1:6379*|redis://localhost:6379*)
      echo "==> starting redis-server on 127.0.0.1:6379"
      mkdir -p /tmp/ddd_celery-redis
      redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
        --dir /tmp/ddd_celery-redis --logfile /tmp/ddd_celery-redis/redis.log
      for _ in $(seq 50); do redis_answers && break; sleep 0.1; done
      ;;
  esac
  redis_answers || { echo "Redis does not answer on $redis_url" >&2; exit 1; }
fi

database_url="${DATABASE_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/test}"
export DATABASE_URL="$database_url"

postgres_answers() {
  python - "$database_url" <<'PY'
import sys, sqlalchemy
try:
    engine = sqlalchemy.create_engine(sys.argv[1], connect_args={"connect_timeout": 2})
    with engine.connect():
        pass
except Exception:
    sys.exit(1)
PY
}

if ! postgres_answers; then
  case "$database_url" in
    *@127.0.0.1:5432/test|*@localhost:5432/test)
      if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
        echo "==> installing postgresql"
        if ! command -v apt-get >/dev/null 2>&1; then
          echo "PostgreSQL is missing and apt-get is not available: install PostgreSQL 13 or newer" >&2
          exit 1
        fi
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
        # A server of its own for tests: the tests' URL carries no password, so trust local TCP.
        sed -i -E 's#^(host\s+all\s+all\s+127\.0\.0\.1/32\s+)\S+#\1trust#' \
          /etc/postgresql/*/main/pg_hba.conf
      fi
      echo "==> starting PostgreSQL on 127.0.0.1:5432"
      version="$(ls /etc/postgresql | head -n 1)"
      # Already running (the package started it): reload, so a changed pg_hba.conf counts.
      pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null \
        || pg_ctlcluster --skip-systemctl-redirect "$version" main reload
      for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
      if ! su postgres -c "psql -tAc \"SELECT 1 FROM pg_database WHERE datname = 'test'\"" | grep -q 1
      then
        su postgres -c "createdb test"
      fi
      ;;
  esac
  postgres_answers || { echo "PostgreSQL does not answer on DATABASE_URL" >&2; exit 1; }
fi
