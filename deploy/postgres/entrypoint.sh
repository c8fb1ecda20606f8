#!/bin/sh
# First start: initdb in $PGDATA (the volume), the role POSTGRES_USER (LOGIN, not a superuser) owning the database
# POSTGRES_DB, password logins (scram-sha-256) from any address of the container network. Every start: the server in
# the foreground, listening on every address of the container (publish its port only if something outside must reach it).
# Extra arguments go to postgres (e.g. -c max_connections=200).
set -eu
POSTGRES_USER=${POSTGRES_USER:-node_svc}
POSTGRES_DB=${POSTGRES_DB:-node_svc}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "postgres-entrypoint: POSTGRES_PASSWORD is not set (see .env.example)" >&2
    exit 2
  fi
  echo "postgres-entrypoint: first start, making the cluster in $PGDATA"
  # The superuser `postgres` logs in only over the local socket as the OS user postgres (podman exec).
  initdb --pgdata="$PGDATA" --username=postgres --encoding=UTF8 --locale=C.UTF-8 \
    --auth-local=peer --auth-host=scram-sha-256 >/dev/null
  printf '%s\n' '# node-svc fleet: password logins from the container network' 'host all all all scram-sha-256' >>"$PGDATA/pg_hba.conf"
  pg_ctl --pgdata="$PGDATA" --options="-c listen_addresses=''" --wait --silent start
  # The password travels in the environment (\getenv), never on a command line.
  psql --no-psqlrc --quiet --set=ON_ERROR_STOP=1 --username=postgres --dbname=postgres \
    --set=user="$POSTGRES_USER" --set=db="$POSTGRES_DB" <<'SQL'
\getenv password POSTGRES_PASSWORD
CREATE ROLE :"user" LOGIN PASSWORD :'password';
CREATE DATABASE :"db" OWNER :"user";
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
SQL
  pg_ctl --pgdata="$PGDATA" --mode=fast --wait --silent stop
  echo "postgres-entrypoint: role $POSTGRES_USER owns database $POSTGRES_DB"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
