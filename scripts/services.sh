#!/usr/bin/env bash
# Makes sure the servers the tests need are reachable: PostgreSQL,
# MariaDB/MySQL and Redis. A URL given in HOLDFAST_TEST_POSTGRES_URL /
# HOLDFAST_TEST_MYSQL_URL / HOLDFAST_TEST_REDIS_URL is used as it is; otherwise the local server is started when installed but
# stopped, and installed from Debian packages when missing and run as root.
# Sourced by scripts/test; exits non-zero when a server cannot be had.
set -euo pipefail

log() { printf 'services: %s\n' "$*" >&2; }
is_root() { [ "$(id -u)" = 0 ]; }

apt_install() {
  if ! is_root; then
    log "cannot install $* without root; install it or point the HOLDFAST_TEST_* URLs at a server"
    return 1
  fi
  if [ -z "${HOLDFAST_APT_UPDATED:-}" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    export HOLDFAST_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

wait_for() { # wait_for SECONDS CMD...
  local n=$1; shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  return 1
}

ensure_postgres() {
  if [ -n "${HOLDFAST_TEST_POSTGRES_URL:-}" ]; then
    log "PostgreSQL: using HOLDFAST_TEST_POSTGRES_URL"
    return 0
  fi
  pg_ok() { psql "postgres://postgres@127.0.0.1:5432/postgres" -Atc 'SELECT 1' >/dev/null 2>&1; }
  if command -v psql >/dev/null && pg_ok; then log "PostgreSQL: up"; return 0; fi
  if ! command -v pg_ctlcluster >/dev/null || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
    log "PostgreSQL: installing"
    apt_install postgresql postgresql-client
  fi
  local ver; ver=$(ls /etc/postgresql | sort -V | tail -n1)
  if ! pg_lsclusters -h 2>/dev/null | grep -q online; then
    log "PostgreSQL $ver: starting"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  fi
  wait_for 30 pg_isready -h 127.0.0.1 -p 5432 || { log "PostgreSQL did not come up"; return 1; }
  if ! pg_ok && is_root; then
    # A fresh Debian cluster asks for passwords on TCP; the tests use trust
    # on the loopback interface only.
    local hba="/etc/postgresql/$ver/main/pg_hba.conf"
    log "PostgreSQL: allowing trust auth on 127.0.0.1 in $hba"
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main reload
    sleep 1
  fi
  pg_ok || { log "PostgreSQL at 127.0.0.1:5432 refuses user postgres"; return 1; }
  log "PostgreSQL: up"
}

ensure_mysql() {
  if [ -n "${HOLDFAST_TEST_MYSQL_URL:-}" ]; then
    log "MySQL: using HOLDFAST_TEST_MYSQL_URL"
    return 0
  fi
  my_ok() { mariadb -h 127.0.0.1 -P 3306 -u root -e 'SELECT 1' >/dev/null 2>&1 || mysql -h 127.0.0.1 -P 3306 -u root -e 'SELECT 1' >/dev/null 2>&1; }
  if my_ok; then log "MariaDB: up"; return 0; fi
  if [ ! -x /usr/sbin/mariadbd ] && [ ! -x /usr/sbin/mysqld ]; then
    log "MariaDB: installing"
    apt_install mariadb-server mariadb-client
  fi
  local daemon=/usr/sbin/mariadbd; [ -x "$daemon" ] || daemon=/usr/sbin/mysqld
  if ! wait_for 1 mariadb-admin ping; then
    log "MariaDB: starting"
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    start-stop-daemon --start --oknodo --background --exec "$daemon"
  fi
  wait_for 30 mariadb-admin ping || { log "MariaDB did not come up"; return 1; }
  if ! my_ok && is_root; then
    # A fresh Debian install lets root in through the unix socket only.
    log "MariaDB: allowing root with an empty password over TCP"
    mariadb -u root -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('')" || true
  fi
  my_ok || { log "MariaDB at 127.0.0.1:3306 refuses root"; return 1; }
  log "MariaDB: up"
}

ensure_redis() {
  # The Redis fault tests start redis-server processes of their own, so the
  # binary must be installed even when HOLDFAST_TEST_REDIS_URL points elsewhere.
  if ! command -v redis-server >/dev/null; then
    log "Redis: installing"
    apt_install redis-server redis-tools
  fi
  if [ -n "${HOLDFAST_TEST_REDIS_URL:-}" ]; then
    log "Redis: using HOLDFAST_TEST_REDIS_URL"
    return 0
  fi
  redis_ok() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }
  if redis_ok; then log "Redis: up"; return 0; fi
  log "Redis: starting"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no >/dev/null
  wait_for 15 redis_ok || { log "Redis did not come up"; return 1; }
  log "Redis: up"
}

# Crash the local database server and start it again (for `bench verify
# --faults restart --restart-cmd`): what a power cut of the server process
# looks like, committed transactions recovered from the log. Root only.
crash_restart_postgres() {
  local ver; ver=$(ls /etc/postgresql | sort -V | tail -n1)
  pg_ctlcluster --skip-systemctl-redirect "$ver" main restart -m immediate
  wait_for 30 pg_isready -h 127.0.0.1 -p 5432
}

crash_restart_mysql() {
  local daemon=/usr/sbin/mariadbd; [ -x "$daemon" ] || daemon=/usr/sbin/mysqld
  pkill -KILL -x "$(basename "$daemon")" || true
  for _ in $(seq 50); do pgrep -x "$(basename "$daemon")" >/dev/null || break; sleep 0.1; done
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec "$daemon"
  wait_for 60 mariadb-admin ping
}
