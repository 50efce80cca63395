#!/usr/bin/env bash
# A private OpenLDAP server (slapd) for the demo and the tests of jupyterhub-gpu.
#
#   scripts/ldap-server.sh start  [options]   start (or reuse) the server; loads the LDIF once
#   scripts/ldap-server.sh stop   [options]   stop it (also one that was SIGSTOPped)
#   scripts/ldap-server.sh status [options]   exit 0 if it runs and answers
#   scripts/ldap-server.sh reset  [options]   stop it and delete its config and data
#
# Options (environment variable in brackets, then the default):
#   --dir DIR        state folder: config, data, pidfile, log  [LDAP_DIR, .demo/ldap]
#   --host HOST      loopback address to listen on             [LDAP_HOST, 127.0.0.1]
#   --port PORT      TCP port                                  [LDAP_PORT, 3890]
#   --suffix DN      base DN of the directory                  [LDAP_SUFFIX, dc=example,dc=org]
#   --ldif FILE      entries to load on first start; repeatable [scripts/ldap/demo.ldif]
#   --schema FILE    one more schema (cn=config LDIF, e.g. scripts/ldap/openssh-lpk.ldif)
#                    loaded on first start after the built-in ones; repeatable
#   --admin-password PW   password of cn=admin,<suffix>; default: random, kept in
#                    DIR/admin.password (mode 0600)            [LDAP_ADMIN_PASSWORD]
#   --tls-cert FILE --tls-key FILE   a PEM certificate (chain) and key: StartTLS on the
#                    ldap:// port; set when the config is made   [LDAP_TLS_CERT, LDAP_TLS_KEY]
#   --ldaps-port PORT  also listen with TLS from the first byte (needs --tls-*) [LDAPS_PORT]
#
# Idempotent: `start` reuses a running server that answers, clears a stale pidfile left by
# a killed one, and loads the LDIF only when DIR has no database yet (use `reset` to reload).
# The configuration is cn=config, made offline with slapadd from an LDIF (schemas core,
# cosine, nis, inetorgperson; one mdb database). It listens on loopback only (plain LDAP,
# StartTLS and ldaps:// when given a certificate),
# and runs as the calling user. ACL: a user may read everything but passwords once bound;
# anonymous clients may only bind. On success `start` prints shell assignments
# (LDAP_URL=..., LDAP_PID=...) that scripts can eval. The log is DIR/slapd.log.
#
# DEMO/TEST ONLY: scripts/ldap/demo.ldif has public passwords. Production sites use their
# own directory (docs/auth.md).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${LDAP_DIR:-$REPO/.demo/ldap}
HOST=${LDAP_HOST:-127.0.0.1}
PORT=${LDAP_PORT:-3890}
SUFFIX=${LDAP_SUFFIX:-dc=example,dc=org}
ADMIN_PASSWORD=${LDAP_ADMIN_PASSWORD:-}
TLS_CERT=${LDAP_TLS_CERT:-}
TLS_KEY=${LDAP_TLS_KEY:-}
LDAPS_PORT=${LDAPS_PORT:-}
LDIFS=()
SCHEMAS=()
MARKER=.jupyterhub-gpu-ldap

log() { printf '[ldap-server] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() { sed -n '2,33p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

parse_args() {
  while (($#)); do
    case $1 in
      --dir) DIR=$2; shift 2 ;;
      --host) HOST=$2; shift 2 ;;
      --port) PORT=$2; shift 2 ;;
      --suffix) SUFFIX=$2; shift 2 ;;
      --ldif) LDIFS+=("$2"); shift 2 ;;
      --schema) SCHEMAS+=("$(realpath "$2")"); shift 2 ;;
      --admin-password) ADMIN_PASSWORD=$2; shift 2 ;;
      --tls-cert) TLS_CERT=$2; shift 2 ;;
      --tls-key) TLS_KEY=$2; shift 2 ;;
      --ldaps-port) LDAPS_PORT=$2; shift 2 ;;
      -h|--help) usage 0 ;;
      *) log "unknown option: $1"; usage 2 ;;
    esac
  done
  ((${#LDIFS[@]})) || LDIFS=("$REPO/scripts/ldap/demo.ldif")
  [[ $PORT =~ ^[0-9]+$ ]] && ((PORT > 0 && PORT < 65536)) || die "--port must be 1-65535, not '$PORT'"
  case $HOST in
    127.*|localhost|::1) ;;
    *) die "--host must be a loopback address (127.x.x.x, ::1): this server holds demo passwords" ;;
  esac
  if [[ -n $TLS_CERT || -n $TLS_KEY ]]; then
    [[ -r $TLS_CERT && -r $TLS_KEY ]] || die "--tls-cert and --tls-key must both be readable files"
    TLS_CERT=$(realpath "$TLS_CERT") TLS_KEY=$(realpath "$TLS_KEY")
  fi
  if [[ -n $LDAPS_PORT ]]; then
    [[ $LDAPS_PORT =~ ^[0-9]+$ ]] && ((LDAPS_PORT > 0 && LDAPS_PORT < 65536)) \
      || die "--ldaps-port must be 1-65535, not '$LDAPS_PORT'"
    [[ -n $TLS_CERT ]] || die "--ldaps-port needs --tls-cert and --tls-key"
  fi
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
}

url() { # url [scheme [port]]
  local scheme=${1:-ldap} port=${2:-$PORT}
  if [[ $HOST == *:* ]]; then echo "$scheme://[$HOST]:$port/"; else echo "$scheme://$HOST:$port/"; fi
}
listen_urls() { echo "$(url)${LDAPS_PORT:+ $(url ldaps "$LDAPS_PORT")}"; }
pidfile() { echo "$DIR/slapd.pid"; }

# A process exists and is not a zombie (a killed slapd is a zombie until it is reaped).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != [ZX] ]]
}

# The pid of our slapd if it is alive, else nothing (and a stale pidfile is removed).
live_pid() {
  local pf pid
  pf=$(pidfile)
  [[ -f $pf ]] || return 0
  pid=$(tr -dc 0-9 <"$pf")
  if [[ -n $pid ]] && alive "$pid" && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == slapd ]]; then
    echo "$pid"
  else
    log "removing stale pidfile $pf (pid ${pid:-?} is gone)"
    rm -f "$pf" "$DIR/slapd.args"
  fi
}

answers() { # the server answers a root DSE search within 2 s
  LDAPTLS_REQCERT=never timeout 3 ldapsearch -x -LLL -o nettimeout=2 -H "$(url)" \
    -b "" -s base namingContexts >/dev/null 2>&1
}

write_config_ldif() {
  local rootpw_hash=$1
  cat <<EOF
dn: cn=config
objectClass: olcGlobal
cn: config
olcPidFile: $DIR/slapd.pid
olcArgsFile: $DIR/slapd.args
olcLogLevel: stats
$(if [[ -n $TLS_CERT ]]; then
    printf 'olcTLSCertificateFile: %s\nolcTLSCertificateKeyFile: %s\n' "$TLS_CERT" "$TLS_KEY"
  fi)

dn: cn=module{0},cn=config
objectClass: olcModuleList
cn: module{0}
olcModulePath: /usr/lib/ldap
olcModuleLoad: back_mdb

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

include: file:///etc/ldap/schema/core.ldif

include: file:///etc/ldap/schema/cosine.ldif

include: file:///etc/ldap/schema/nis.ldif

include: file:///etc/ldap/schema/inetorgperson.ldif
$(for f in ${SCHEMAS[@]+"${SCHEMAS[@]}"}; do printf '\ninclude: file://%s\n' "$f"; done)

dn: olcDatabase={-1}frontend,cn=config
objectClass: olcDatabaseConfig
objectClass: olcFrontendConfig
olcDatabase: {-1}frontend
olcSizeLimit: 500

dn: olcDatabase={0}config,cn=config
objectClass: olcDatabaseConfig
olcDatabase: {0}config
olcAccess: {0}to * by * none

dn: olcDatabase={1}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {1}mdb
olcSuffix: $SUFFIX
olcRootDN: cn=admin,$SUFFIX
olcRootPW: $rootpw_hash
olcDbDirectory: $DIR/data
olcDbMaxSize: 67108864
olcDbIndex: objectClass eq
olcDbIndex: uid,memberUid,member,uniqueMember eq
olcAccess: {0}to attrs=userPassword by self write by anonymous auth by * none
olcAccess: {1}to * by users read by * none
EOF
}

initialise() {
  local f
  for f in "${LDIFS[@]}" ${SCHEMAS[@]+"${SCHEMAS[@]}"}; do [[ -r $f ]] || die "cannot read LDIF $f"; done
  if [[ -z $ADMIN_PASSWORD ]]; then
    if [[ -s $DIR/admin.password ]]; then
      ADMIN_PASSWORD=$(cat "$DIR/admin.password")
    else
      ADMIN_PASSWORD=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
    fi
  fi
  (umask 077 && printf '%s' "$ADMIN_PASSWORD" >"$DIR/admin.password")
  log "creating config and database in $DIR"
  rm -rf "$DIR/slapd.d" "$DIR/data"
  mkdir -p "$DIR/slapd.d" "$DIR/data"
  touch "$DIR/$MARKER"
  write_config_ldif "$(slappasswd -T "$DIR/admin.password")" >"$DIR/config.ldif"
  slapadd -q -n 0 -F "$DIR/slapd.d" -l "$DIR/config.ldif" \
    || die "slapadd of the cn=config LDIF failed (see above)"
  for f in "${LDIFS[@]}"; do
    log "loading $f"
    slapadd -q -n 1 -F "$DIR/slapd.d" -l "$f" || die "slapadd of $f failed (see above)"
  done
}

cmd_start() {
  command -v slapd >/dev/null || [[ -x /usr/sbin/slapd ]] \
    || die "slapd is not installed: apt-get install -y slapd ldap-utils"
  export PATH=$PATH:/usr/sbin
  local pid
  pid=$(live_pid)
  if [[ -n $pid ]]; then
    if answers; then
      log "already running (pid $pid) on $(url)"
      report "$pid"
      return 0
    fi
    die "slapd pid $pid is alive but does not answer on $(url) (stopped? other port?); run '$0 stop --dir $DIR' first"
  fi
  [[ -d $DIR/slapd.d && -f $DIR/$MARKER ]] || initialise
  log "starting slapd on $(listen_urls)"
  # -d keeps slapd in the foreground (so its log goes to a file); setsid detaches it from
  # our terminal and process group.
  setsid slapd -F "$DIR/slapd.d" -h "$(listen_urls)" -d stats >>"$DIR/slapd.log" 2>&1 </dev/null &
  local i
  for ((i = 0; i < 100; i++)); do
    pid=$(live_pid 2>/dev/null)
    if [[ -n $pid ]] && answers; then
      log "running (pid $pid)"
      report "$pid"
      return 0
    fi
    kill -0 $! 2>/dev/null || break
    sleep 0.1
  done
  tail -n 20 "$DIR/slapd.log" >&2 || true
  die "slapd did not come up on $(url) (log: $DIR/slapd.log)"
}

report() {
  printf 'LDAP_URL=%q\nLDAP_HOST=%q\nLDAP_PORT=%q\nLDAP_SUFFIX=%q\n' "$(url)" "$HOST" "$PORT" "$SUFFIX"
  printf 'LDAP_ADMIN_DN=%q\nLDAP_ADMIN_PASSWORD_FILE=%q\nLDAP_PID=%q\nLDAP_DIR=%q\n' \
    "cn=admin,$SUFFIX" "$DIR/admin.password" "$1" "$DIR"
  if [[ -n $LDAPS_PORT ]]; then printf 'LDAPS_URL=%q\nLDAPS_PORT=%q\n' "$(url ldaps "$LDAPS_PORT")" "$LDAPS_PORT"; fi
}

cmd_stop() {
  local pid i
  pid=$(live_pid)
  if [[ -z $pid ]]; then
    log "not running"
    return 0
  fi
  log "stopping slapd (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  kill -CONT "$pid" 2>/dev/null || true # a SIGSTOPped slapd handles TERM only once resumed
  for ((i = 0; i < 100; i++)); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    log "slapd did not stop in 10 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$(pidfile)" "$DIR/slapd.args"
}

cmd_status() {
  local pid
  pid=$(live_pid)
  if [[ -n $pid ]] && answers; then
    log "running (pid $pid) on $(url)"
    return 0
  fi
  log "not running${pid:+ (pid $pid does not answer)}"
  return 1
}

cmd_reset() {
  cmd_stop
  if [[ -d $DIR/slapd.d || -d $DIR/data ]]; then
    [[ -f $DIR/$MARKER ]] || die "$DIR was not made by this script; not deleting anything there"
    rm -rf "$DIR/slapd.d" "$DIR/data" "$DIR/config.ldif" "$DIR/admin.password" "$DIR/$MARKER"
    log "deleted config and data in $DIR"
  fi
}

main() {
  local cmd=${1:-}
  (($#)) && shift
  case $cmd in
    start|stop|status|reset) parse_args "$@"; "cmd_$cmd" ;;
    -h|--help|help) usage 0 ;;
    *) usage 2 ;;
  esac
}

main "$@"
