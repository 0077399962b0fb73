#!/usr/bin/env bash
# Makes sure the servers the tests need are reachable: PostgreSQL,
# MariaDB/MySQL, Redis and PgBouncer (and that promtool is installed, for
# the rules in deploy/). A URL given in HOLDFAST_TEST_POSTGRES_URL /
# HOLDFAST_TEST_MYSQL_URL / HOLDFAST_TEST_REDIS_URL / HOLDFAST_TEST_PGBOUNCER_URL is used as it is; otherwise the local server is started when installed but
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
  if command -v psql >/dev/null && pg_ok; then pg_autovacuum_on; log "PostgreSQL: up"; return 0; fi
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
  pg_autovacuum_on
  log "PostgreSQL: up"
}

# Autovacuum on, as on every production server (this machine's
# configuration turns it off), with the 10 s naptime the README recommends
# for holdfast: benchmarks and soak runs measure with it.
pg_autovacuum_on() {
  local pg="postgres://postgres@127.0.0.1:5432/postgres"
  if [ "$(psql "$pg" -Atc 'SHOW autovacuum')" != on ] || [ "$(psql "$pg" -Atc 'SHOW autovacuum_naptime')" != 10s ]; then
    log "PostgreSQL: turning autovacuum on, naptime 10 s (ALTER SYSTEM)"
    psql "$pg" -q -c "ALTER SYSTEM SET autovacuum = on" -c "ALTER SYSTEM SET autovacuum_naptime = '10s'" \
      -c "SELECT pg_reload_conf()" >/dev/null
  fi
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

# PgBouncer in transaction mode in front of the local PostgreSQL, on
# 127.0.0.1:6432, for the tests of holdfast behind a pooler
# (HOLDFAST_TEST_PGBOUNCER_URL, exported). Debian's package (1.18) is what
# is installed when missing; any database name reaches the same-named
# database of the server as user postgres.
ensure_pgbouncer() {
  if [ -n "${HOLDFAST_TEST_PGBOUNCER_URL:-}" ]; then
    log "PgBouncer: using HOLDFAST_TEST_PGBOUNCER_URL"
    return 0
  fi
  export HOLDFAST_TEST_PGBOUNCER_URL="postgres://postgres@127.0.0.1:6432/postgres?pooler=transaction"
  pgb_ok() { psql "postgres://postgres@127.0.0.1:6432/postgres" -Atc 'SELECT 1' >/dev/null 2>&1; }
  if pgb_ok; then log "PgBouncer: up"; return 0; fi
  if [ ! -x /usr/sbin/pgbouncer ] && ! command -v pgbouncer >/dev/null; then
    log "PgBouncer: installing"
    apt_install pgbouncer
  fi
  local dir="${TMPDIR:-/tmp}/holdfast-pgbouncer"
  mkdir -p "$dir"
  # sqlx sends extra_float_digits at start-up, which PgBouncer 1.18 refuses
  # unless it is told to ignore it.
  printf '%s\n' \
    '[databases]' \
    '* = host=127.0.0.1 port=5432 user=postgres' \
    '[pgbouncer]' \
    'listen_addr = 127.0.0.1' \
    'listen_port = 6432' \
    'auth_type = any' \
    'pool_mode = transaction' \
    'max_client_conn = 4000' \
    'default_pool_size = 40' \
    'ignore_startup_parameters = extra_float_digits' \
    "logfile = $dir/pgbouncer.log" \
    "pidfile = $dir/pgbouncer.pid" \
    'unix_socket_dir =' > "$dir/pgbouncer.ini"
  log "PgBouncer: starting"
  local bin; bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
  if is_root; then
    # PgBouncer will not run as root.
    chown -R postgres "$dir"
    su postgres -s /bin/sh -c "$bin -d $dir/pgbouncer.ini"
  else
    "$bin" -d "$dir/pgbouncer.ini"
  fi
  wait_for 15 pgb_ok || { log "PgBouncer did not come up (see $dir/pgbouncer.log)"; return 1; }
  log "PgBouncer: up"
}

# promtool, for the tests that check the Prometheus rules in deploy/
# (`promtool check rules`, `promtool test rules`): Debian's prometheus
# package, installed when missing and run as root (its server is not
# started: promtool is all the tests use).
ensure_promtool() {
  if command -v promtool >/dev/null; then log "promtool: $(promtool --version 2>&1 | head -n1)"; return 0; fi
  log "promtool: installing Debian's prometheus package"
  apt_install --no-install-recommends prometheus || { log "promtool: cannot be installed"; return 1; }
  command -v promtool >/dev/null || { log "promtool: still missing after installing prometheus"; return 1; }
  log "promtool: $(promtool --version 2>&1 | head -n1)"
}

# Chromium and ChromeDriver, for the console's browser tests: Debian's
# chromium and chromium-driver packages, installed when missing and run as
# root. HOLDFAST_TEST_CHROMIUM / HOLDFAST_TEST_CHROMEDRIVER name other
# binaries.
ensure_chromium() {
  local browser=${HOLDFAST_TEST_CHROMIUM:-/usr/bin/chromium} driver=${HOLDFAST_TEST_CHROMEDRIVER:-/usr/bin/chromedriver}
  if [ ! -x "$browser" ] || [ ! -x "$driver" ]; then
    log "Chromium: installing Debian's chromium and chromium-driver"
    apt_install --no-install-recommends chromium chromium-driver || { log "Chromium: cannot be installed"; return 1; }
  fi
  [ -x "$browser" ] && [ -x "$driver" ] || { log "Chromium: $browser or $driver still missing"; return 1; }
  log "Chromium: $("$driver" --version 2>/dev/null | cut -d' ' -f1-2)"
}

# Test certificates: a CA made on first use (kept, so servers configured
# with its certificates keep working across runs), a server certificate it
# signed for 127.0.0.1, ::1 and localhost, a second one (a renewal, for the
# reload test) and an unrelated CA (for the wrong-CA tests). Exported as
# HOLDFAST_TEST_TLS_DIR.
ensure_test_certs() {
  local dir="${HOLDFAST_TEST_TLS_DIR:-/var/lib/holdfast-test-tls}"
  export HOLDFAST_TEST_TLS_DIR="$dir"
  if [ -s "$dir/server-renewed.pem" ]; then return 0; fi
  command -v openssl >/dev/null || apt_install openssl
  log "TLS: making a test CA and server certificates in $dir"
  mkdir -p "$dir"
  local tmp; tmp=$(mktemp -d)
  ca() { # ca NAME CN
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$2" \
      -keyout "$tmp/$1.key" -out "$tmp/$1.pem" -addext basicConstraints=critical,CA:TRUE \
      -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  }
  leaf() { # leaf NAME CN
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$tmp/$1.key" -out "$tmp/$1.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' >"$tmp/$1.ext"
    openssl x509 -req -in "$tmp/$1.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial -days 3650 \
      -extfile "$tmp/$1.ext" -out "$tmp/$1.pem" 2>/dev/null
  }
  ca ca "holdfast test CA"
  ca wrong-ca "an unrelated CA"
  leaf server "holdfast test server"
  leaf server-renewed "holdfast test server (renewed)"
  cp "$tmp"/{ca,wrong-ca,server,server-renewed}.pem "$tmp"/{server,server-renewed}.key "$dir/"
  chmod 0644 "$dir"/*.pem; chmod 0600 "$dir"/*.key
  # Each server wants its own copy of the key, owned by its user.
  for who in postgres mysql; do
    if id "$who" >/dev/null 2>&1; then
      mkdir -p "$dir/$who"; cp "$tmp/server.key" "$dir/$who/server.key"
      chown -R "$who" "$dir/$who"; chmod 0700 "$dir/$who"; chmod 0600 "$dir/$who/server.key"
    fi
  done
  chmod 0755 "$dir"
  rm -rf "$tmp"
}

# PostgreSQL serves the test CA's certificate (ALTER SYSTEM + reload; no
# restart), so clients can connect with sslmode=verify-full.
ensure_postgres_tls() {
  ensure_test_certs
  [ -n "${HOLDFAST_TEST_POSTGRES_URL:-}" ] && return 0
  local dir=$HOLDFAST_TEST_TLS_DIR
  pg_tls_ok() { psql "host=127.0.0.1 user=postgres dbname=postgres sslmode=verify-full sslrootcert=$dir/ca.pem" -Atc 'SELECT 1' >/dev/null 2>&1; }
  # holdfast_tls: a superuser that pg_hba lets in over TLS only, so a test
  # connecting as it proves every connection of its pool is encrypted.
  pg_tls_only() {
    pg_tls_ok && psql "host=127.0.0.1 user=holdfast_tls dbname=postgres sslmode=verify-full sslrootcert=$dir/ca.pem" -Atc 'SELECT 1' >/dev/null 2>&1 \
      && ! psql "host=127.0.0.1 user=holdfast_tls dbname=postgres sslmode=disable" -Atc 'SELECT 1' >/dev/null 2>&1
  }
  if pg_tls_only; then log "PostgreSQL TLS: up"; return 0; fi
  is_root || { log "PostgreSQL TLS: not configured with the test CA, and configuring it needs root"; return 1; }
  log "PostgreSQL TLS: serving the test CA's certificate; user holdfast_tls over TLS only"
  local ver; ver=$(ls /etc/postgresql | sort -V | tail -n1)
  local hba="/etc/postgresql/$ver/main/pg_hba.conf"
  grep -q holdfast_tls "$hba" || sed -i '1i hostssl all holdfast_tls 127.0.0.1/32 trust\nhost all holdfast_tls 127.0.0.1/32 reject\nhost all holdfast_tls ::1/128 reject' "$hba"
  psql "postgres://postgres@127.0.0.1:5432/postgres" -q \
    -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'holdfast_tls') THEN CREATE ROLE holdfast_tls LOGIN SUPERUSER; END IF; END \$\$" \
    -c "ALTER SYSTEM SET ssl = on" \
    -c "ALTER SYSTEM SET ssl_cert_file = '$dir/server.pem'" \
    -c "ALTER SYSTEM SET ssl_key_file = '$dir/postgres/server.key'" \
    -c "SELECT pg_reload_conf()" >/dev/null
  wait_for 10 pg_tls_only || { log "PostgreSQL TLS did not come up"; return 1; }
  log "PostgreSQL TLS: up"
}

# MariaDB has TLS off until it is given a certificate at start-up: an
# include in my.cnf names the test certificates, then one restart.
ensure_mysql_tls() {
  ensure_test_certs
  [ -n "${HOLDFAST_TEST_MYSQL_URL:-}" ] && return 0
  local dir=$HOLDFAST_TEST_TLS_DIR
  my_tls_ok() { mariadb -h 127.0.0.1 -P 3306 -u root --ssl --ssl-ca="$dir/ca.pem" --ssl-verify-server-cert -e 'SELECT 1' >/dev/null 2>&1; }
  # holdfast_tls: a user the server lets in over TLS only (REQUIRE SSL).
  my_tls_only() {
    mariadb -h 127.0.0.1 -P 3306 -u root -e "CREATE USER IF NOT EXISTS 'holdfast_tls'@'%' REQUIRE SSL; GRANT ALL ON *.* TO 'holdfast_tls'@'%'" >/dev/null 2>&1 \
      && mariadb -h 127.0.0.1 -P 3306 -u holdfast_tls --ssl --ssl-ca="$dir/ca.pem" --ssl-verify-server-cert -e 'SELECT 1' >/dev/null 2>&1 \
      && ! mariadb -h 127.0.0.1 -P 3306 -u holdfast_tls --skip-ssl -e 'SELECT 1' >/dev/null 2>&1
  }
  if my_tls_ok && my_tls_only; then log "MariaDB TLS: up"; return 0; fi
  is_root || { log "MariaDB TLS: not configured with the test CA, and configuring it needs root"; return 1; }
  log "MariaDB TLS: configuring the test certificates and restarting"
  printf '[mysqld]\nssl_ca = %s\nssl_cert = %s\nssl_key = %s\n' \
    "$dir/ca.pem" "$dir/server.pem" "$dir/mysql/server.key" >/etc/mysql/holdfast-tls.cnf
  grep -q holdfast-tls.cnf /etc/mysql/my.cnf || printf '\n!include /etc/mysql/holdfast-tls.cnf\n' >>/etc/mysql/my.cnf
  mariadb-admin -h 127.0.0.1 -u root shutdown || true
  for _ in $(seq 100); do pgrep -x mariadbd >/dev/null || pgrep -x mysqld >/dev/null || break; sleep 0.1; done
  ensure_mysql
  wait_for 10 my_tls_ok && my_tls_only || { log "MariaDB TLS did not come up"; return 1; }
  log "MariaDB TLS: up"
}

# A second Redis on 6380 speaking TLS only (rediss://), with the test
# certificate; clients need no certificate of their own.
ensure_redis_tls() {
  ensure_test_certs
  ensure_redis
  local dir=$HOLDFAST_TEST_TLS_DIR
  redis_tls_ok() { redis-cli --tls --cacert "$dir/ca.pem" -h 127.0.0.1 -p 6380 ping 2>/dev/null | grep -q PONG; }
  if redis_tls_ok; then log "Redis TLS: up"; return 0; fi
  log "Redis TLS: starting on 6380"
  redis-server --daemonize yes --bind 127.0.0.1 --port 0 --tls-port 6380 --save "" --appendonly no \
    --tls-cert-file "$dir/server.pem" --tls-key-file "$dir/server.key" --tls-ca-cert-file "$dir/ca.pem" \
    --tls-auth-clients no >/dev/null
  wait_for 15 redis_tls_ok || { log "Redis TLS did not come up"; return 1; }
  log "Redis TLS: up"
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

# schemathesis (from PyPI, the versions pinned in
# scripts/schemathesis-requirements.txt) in a venv of its own, made again
# when that file changes; SCHEMATHESIS is exported with its path. Needs
# Python 3.10 or later with venv (installed from Debian packages when
# missing and run as root).
ensure_schemathesis() {
  local reqs; reqs="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/schemathesis-requirements.txt"
  local venv="${HOLDFAST_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/holdfast-schemathesis}"
  export SCHEMATHESIS="$venv/bin/schemathesis"
  if [ -x "$SCHEMATHESIS" ] && cmp -s "$reqs" "$venv/requirements.txt"; then
    log "schemathesis: $("$SCHEMATHESIS" --version 2>/dev/null | tail -n1)"
    return 0
  fi
  local py=""
  for candidate in python3.13 python3.12 python3.11 python3.10 python3; do
    if command -v "$candidate" >/dev/null \
      && "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      py=$candidate
      break
    fi
  done
  if [ -z "$py" ]; then
    log "schemathesis: installing Python 3 and venv"
    apt_install python3 python3-venv
    py=python3
  fi
  log "schemathesis: installing into $venv (with $("$py" --version))"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --requirement "$reqs" \
    || { log "schemathesis: pip install failed"; return 1; }
  cp "$reqs" "$venv/requirements.txt"
  log "schemathesis: $("$SCHEMATHESIS" --version 2>/dev/null | tail -n1)"
}
