#!/bin/bash
# redis-topology.sh: start and stop multi-node Redis topologies on 127.0.0.1,
# built from Debian's redis-server / redis-sentinel (or Valkey's, see
# DLOCK_TOPOLOGY_SERVER), for tests and for trying
# dlock's redis-cluster:// and redis-sentinel:// URLs by hand.
#
#   redis-topology.sh cluster start DIR [BASE_PORT]   3 masters + 3 replicas
#   redis-topology.sh sentinel start DIR [BASE_PORT]  master + replica + 3 Sentinels
#   redis-topology.sh status DIR                      NODE lines with live roles, URL
#   redis-topology.sh restart DIR PORT                start one stopped node again
#   redis-topology.sh stop DIR                        stop every process started under DIR
#   redis-topology.sh clean DIR                       stop, then remove DIR
#
# start prints machine-readable lines on stdout:
#   NODE <port> <pid> master|replica|sentinel <master-port or ->
#   URL redis-cluster://127.0.0.1:P1,...  or  redis-sentinel://127.0.0.1:S1,.../mymaster
# Without BASE_PORT, free ports are found by binding port 0 (a cluster node
# needs PORT+10000 free too, for its bus); a start that loses a port race is
# retried on new ports. With BASE_PORT the nodes use BASE_PORT, BASE_PORT+1...
#
# Environment (milliseconds unless said):
#   DLOCK_CLUSTER_NODE_TIMEOUT_MS      cluster-node-timeout (default 1000)
#   DLOCK_SENTINEL_DOWN_AFTER_MS       down-after-milliseconds (default 1000)
#   DLOCK_SENTINEL_FAILOVER_TIMEOUT_MS failover-timeout (default 3000)
#   DLOCK_TOPOLOGY_PASSWORD            requirepass/masterauth on data nodes
#                                      (Sentinels get auth-pass; they need none)
#   DLOCK_TOPOLOGY_WAIT_S              how long start waits for readiness (default 30 s)
#   DLOCK_TOPOLOGY_TLS                 a directory of certificates (scripts/tls-certs.sh):
#                                      every node also listens for TLS on its port + 1000,
#                                      nodes reach each other over TLS (replication,
#                                      the cluster bus, Sentinels), and the URLs printed
#                                      are rediss-cluster:// / rediss-sentinel:// ones on
#                                      the TLS ports; NODE lines keep the plaintext ports
#   DLOCK_TOPOLOGY_SERVER              the data nodes' program (default redis-server;
#                                      valkey-server for Valkey); Sentinels run its
#                                      NAME-sentinel, commands go through NAME-cli
#                                      (redis-cli when there is none)
#
# Exit status: 0 done, 1 failed (message on stderr), 64 usage error.
set -eu

NODE_TIMEOUT=${DLOCK_CLUSTER_NODE_TIMEOUT_MS:-1000}
DOWN_AFTER=${DLOCK_SENTINEL_DOWN_AFTER_MS:-1000}
FAILOVER_TIMEOUT=${DLOCK_SENTINEL_FAILOVER_TIMEOUT_MS:-3000}
PASSWORD=${DLOCK_TOPOLOGY_PASSWORD:-}
WAIT_S=${DLOCK_TOPOLOGY_WAIT_S:-30}
SERVER=${DLOCK_TOPOLOGY_SERVER:-redis-server}
TLS_DIR=${DLOCK_TOPOLOGY_TLS:-}
TLS_OFFSET=1000
SENTINEL=${SERVER%-server}-sentinel
CLI=${SERVER%-server}-cli
command -v "$CLI" >/dev/null 2>&1 || CLI=redis-cli
MASTER_NAME=mymaster
MARKER=.redis-topology
STARTING=""

# Data nodes get the password through the environment, never argv.
unset REDISCLI_AUTH
if [ -n "$PASSWORD" ]; then export REDISCLI_AUTH="$PASSWORD"; fi

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
    exit 64
}

# A start that fails stops what it started (its logs stay in DIR).
die() {
    echo "redis-topology: $*" >&2
    if [ -n "$STARTING" ]; then
        local dir="$STARTING"
        STARTING=""
        # shellcheck disable=SC2046
        stop_pids $(pids_under "$dir") || true
    fi
    exit 1
}

# A redis-cli call to a data node, bounded so a paused node cannot hang us;
# the password goes through the environment, not argv.
rcli() {
    local port="$1"
    shift
    timeout 3 "$CLI" --no-auth-warning -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
}

# The same for a Sentinel, which has no password of its own.
scli() {
    local port="$1"
    shift
    env -u REDISCLI_AUTH timeout 3 "$CLI" -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
}

# N free loopback ports, each with PORT+1000 (its TLS port) free as well
# with DLOCK_TOPOLOGY_TLS, and when BUS is 1 its cluster bus port: 10000
# above the port the cluster speaks (the TLS one with tls-cluster); all
# probes stay open until the whole set is chosen so the ports are
# distinct. Chosen at random in 10000-21767, so that all stay below the kernel's
# ephemeral range (32768 up): there the local end of any client connection
# (a redis-cli, a replica's link) could take a port between this probe and
# the server's bind, and the kernel, asked for port 0, hands two
# topologies started at once the same ports.
free_ports() {
    perl -MIO::Socket::INET -e '
        my ($n, $bus, $tls) = @ARGV;
        my (@keep, @out, %seen);
        srand($$ ^ time);
        for (my $i = 0; @out < $n && $i < 2000; $i++) {
            my $p = 10000 + int(rand(11768));
            next if $seen{$p}++;
            my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $p,
                                          Proto => "tcp", Listen => 1) or next;
            my @more;
            push @more, $p + ($tls || 0) + 10000 if $bus;
            push @more, $p + $tls if $tls;
            my $ok = 1;
            for my $q (@more) {
                if ($q > 65535) { $ok = 0; last }
                my $b = IO::Socket::INET->new(LocalAddr => "127.0.0.1",
                    LocalPort => $q, Proto => "tcp", Listen => 1) or do { $ok = 0; last };
                push @keep, $b;
            }
            next unless $ok;
            push @keep, $s;
            push @out, $p;
        }
        exit 1 if @out < $n;
        print join(" ", @out), "\n";' "$1" "$2" "${TLS_DIR:+$TLS_OFFSET}"
}

# The port other nodes and clients use for a node: its TLS port with
# DLOCK_TOPOLOGY_TLS, else the port itself.
peer_port() {
    if [ -n "$TLS_DIR" ]; then echo $(($1 + TLS_OFFSET)); else echo "$1"; fi
}

# The other way: a port a node reported (a replica's master), as NODE
# lines give it.
plain_port() {
    if [ -n "$TLS_DIR" ] && [ "$1" -gt "$TLS_OFFSET" ] 2>/dev/null; then echo $(($1 - TLS_OFFSET)); else echo "$1"; fi
}

# "redis" or "rediss", and the URL's TLS parameters.
url_scheme() {
    if [ -n "$TLS_DIR" ]; then echo rediss; else echo redis; fi
}
url_query() {
    if [ -n "$TLS_DIR" ]; then echo "?cacert=$TLS_DIR/ca.pem"; fi
}

# Ports for this start: given base and count, or free ones.
pick_ports() {
    local n="$1" bus="$2" base="$3" i=0 out=""
    if [ -n "$base" ]; then
        while [ "$i" -lt "$n" ]; do out="$out $((base + i))"; i=$((i + 1)); done
        echo "${out# }"
    else
        free_ports "$n" "$bus"
    fi
}

# Canonical absolute path of an existing directory.
canon() {
    (cd "$1" && pwd -P)
}

# True when PID is a live (not zombie) process; no forks, it runs in loops.
alive() {
    local line
    [ -n "$1" ] && [ "$1" != 0 ] || return 1
    read -r line 2>/dev/null <"/proc/$1/stat" || return 1
    line=${line##*) }
    case ${line%% *} in Z|X|'') return 1 ;; esac
}

# PIDs of the redis and valkey processes whose working directory is under
# DIR (every node chdirs to its own directory there). Working directory plus
# executable, not a name match, so nothing else is ever signalled; both
# families, so a stop finds the nodes of a start made with another
# DLOCK_TOPOLOGY_SERVER than its own.
pids_under() {
    local root cwd pid exe
    root=$(canon "$1")
    find /proc/[0-9]*/cwd -maxdepth 0 \( -lname "$root" -o -lname "$root/*" \) 2>/dev/null |
    while read -r cwd; do
        pid=${cwd#/proc/}
        pid=${pid%/cwd}
        exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
        case ${exe##*/} in redis-*|valkey-*) echo "$pid" ;; esac
    done
}

# Wait up to 5 s for PIDs to end; the ones still alive are left in LEFT.
wait_gone() {
    local p _
    for _ in $(seq 50); do
        LEFT=""
        for p in "$@"; do alive "$p" && LEFT="$LEFT $p"; done
        [ -z "$LEFT" ] && return 0
        sleep 0.1
    done
    return 1
}

# Stop PIDs: SIGCONT (a paused node cannot handle SIGTERM), SIGTERM, up to
# 5 s for a clean exit, then SIGKILL.
stop_pids() {
    [ $# -gt 0 ] || return 0
    kill -CONT "$@" 2>/dev/null || true
    kill -TERM "$@" 2>/dev/null || true
    wait_gone "$@" && return 0
    # shellcheck disable=SC2086
    kill -KILL $LEFT 2>/dev/null || true
    wait_gone "$@" || die "could not stop:$LEFT"
}

# Config lines every process has: loopback port, daemonized with its pid,
# log and working directory in its own node directory.
process_conf() {
    printf 'port %s\nbind 127.0.0.1\ndaemonize yes\npidfile %s/redis.pid\nlogfile %s/redis.log\ndir %s\n' \
        "$2" "$1" "$1" "$1"
    if [ -n "$TLS_DIR" ]; then
        printf 'tls-port %s\ntls-cert-file %s/server.pem\ntls-key-file %s/server.key\n' \
            "$(($2 + TLS_OFFSET))" "$TLS_DIR" "$TLS_DIR"
        printf 'tls-ca-cert-file %s/ca.pem\ntls-auth-clients no\ntls-replication yes\n' "$TLS_DIR"
    fi
}

# Write the config shared by every data node (cluster or sentinel-managed).
write_data_conf() {
    local d="$1" port="$2"
    process_conf "$d" "$port" >"$d/redis.conf"
    cat >>"$d/redis.conf" <<EOF
save ""
appendonly no
shutdown-timeout 0
repl-diskless-sync yes
repl-diskless-sync-delay 0
replica-announce-ip 127.0.0.1
enable-debug-command local
EOF
    if [ -n "$PASSWORD" ]; then
        printf 'requirepass "%s"\nmasterauth "%s"\n' "$PASSWORD" "$PASSWORD" >>"$d/redis.conf"
    fi
}

# Start one node from the config already in its directory (daemonized; it
# writes its own pidfile).
spawn() {
    local d="$1"
    rm -f "$d/redis.pid"
    if [ -f "$d/sentinel.conf" ]; then
        if command -v "$SENTINEL" >/dev/null 2>&1; then
            "$SENTINEL" "$d/sentinel.conf" >/dev/null 2>&1
        else
            "$SERVER" "$d/sentinel.conf" --sentinel >/dev/null 2>&1
        fi
    else
        "$SERVER" "$d/redis.conf" >/dev/null 2>&1
    fi
}

# Wait until a spawned node answers PING; fail fast when its log says the
# port was taken.
wait_up() {
    local d="$1" port="$2" cli=rcli _
    [ -f "$d/sentinel.conf" ] && cli=scli
    for _ in $(seq 300); do
        if [ -s "$d/redis.pid" ] && [ "$($cli "$port" PING)" = PONG ]; then
            return 0
        fi
        if grep -q -e "Address already in use" -e "Could not create server TCP" "$d/redis.log" 2>/dev/null; then
            return 1
        fi
        sleep 0.1
    done
    return 1
}

launch() {
    spawn "$1" && wait_up "$1" "$2"
}

# Start every node of PORTS under DIR with the given config writer, all at
# once, then wait for each; on any failure stop what was started, remove
# the node directories and fail.
launch_all() {
    local dir="$1" writer="$2" port p ok=1
    shift 2
    for port in "$@"; do
        mkdir -p "$dir/$port"
        $writer "$dir/$port" "$port"
        spawn "$dir/$port" || ok=""
    done
    if [ -n "$ok" ]; then
        for port in "$@"; do
            wait_up "$dir/$port" "$port" && continue
            ok=""
            # Why, for whoever reads a failed run: the node's last words.
            echo "redis-topology: node $port did not come up:" >&2
            tail -n 3 "$dir/$port/redis.log" >&2 2>/dev/null
            break
        done
    fi
    [ -n "$ok" ] && return 0
    # shellcheck disable=SC2046
    stop_pids $(pids_under "$dir")
    for p in "$@"; do rm -rf "${dir:?}/$p"; done
    return 1
}

# Repeat until the command succeeds or DLOCK_TOPOLOGY_WAIT_S passes.
wait_for() {
    local what="$1" end
    shift
    end=$(($(date +%s) + WAIT_S))
    while ! "$@"; do
        [ "$(date +%s)" -lt "$end" ] || die "timed out waiting for $what"
        sleep 0.1
    done
}

pid_of() {
    cat "$1/$2/redis.pid" 2>/dev/null || echo 0
}

# ---------------------------------------------------------------- cluster

write_cluster_conf() {
    write_data_conf "$1" "$2"
    cat >>"$1/redis.conf" <<EOF
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout $NODE_TIMEOUT
cluster-replica-validity-factor 0
cluster-announce-ip 127.0.0.1
EOF
    [ -z "$TLS_DIR" ] || echo "tls-cluster yes" >>"$1/redis.conf"
}

# Node table from one node's CLUSTER NODES: "port role master-port" lines
# (role master|replica, master-port "-" for masters), live nodes only.
cluster_roles() {
    rcli "$1" CLUSTER NODES | awk '
        { addr = $2; sub(/@.*/, "", addr); sub(/.*:/, "", addr)
          port[$1] = addr; flags[$1] = $3; master[$1] = $4; ids[++n] = $1 }
        END { for (i = 1; i <= n; i++) { id = ids[i]
                if (flags[id] ~ /fail|handshake|noaddr/ && flags[id] !~ /myself/) continue
                if (flags[id] ~ /master/) print port[id], "master", "-"
                else print port[id], "replica", (master[id] in port ? port[master[id]] : "-") } }'
}

# Ready: every node says cluster_state:ok and knows 6 nodes, all agree on
# the slot map (redis-cli --cluster check), 3 masters each have a replica
# whose link is up.
cluster_ready() {
    local p info roles
    for p in "$@"; do
        info=$(rcli "$p" CLUSTER INFO) || return 1
        echo "$info" | grep -q '^cluster_state:ok' || return 1
        echo "$info" | grep -q '^cluster_known_nodes:6' || return 1
    done
    timeout 5 "$CLI" --no-auth-warning --cluster check "127.0.0.1:$1" >/dev/null 2>&1 || return 1
    roles=$(cluster_roles "$1")
    [ "$(echo "$roles" | grep -c ' master ')" = 3 ] || return 1
    [ "$(echo "$roles" | grep -c ' replica ')" = 3 ] || return 1
    # each master has exactly one replica
    [ "$(echo "$roles" | awk '$2 == "replica" { print $3 }' | sort -u | wc -l)" = 3 ] || return 1
    for p in $(echo "$roles" | awk '$2 == "replica" { print $1 }'); do
        rcli "$p" INFO replication | grep -q '^master_link_status:up' || return 1
    done
}

cluster_start() {
    local dir="$1" base="${2:-}" attempts=5 ports="" addrs="" p first _
    [ -n "$base" ] && attempts=1
    for _ in $(seq "$attempts"); do
        ports=$(pick_ports 6 1 "$base") || die "no free ports"
        # shellcheck disable=SC2086
        launch_all "$dir" write_cluster_conf $ports && break
        ports=""
    done
    [ -n "$ports" ] || die "could not start 6 cluster nodes (ports taken?)"
    echo cluster >"$dir/$MARKER"
    addrs=""
    for p in $ports; do addrs="$addrs 127.0.0.1:$p"; done
    # shellcheck disable=SC2086
    if ! timeout "$WAIT_S" "$CLI" --no-auth-warning --cluster create $addrs \
            --cluster-replicas 1 --cluster-yes >"$dir/cluster-create.log" 2>&1; then
        die "$CLI --cluster create failed, see $dir/cluster-create.log"
    fi
    # shellcheck disable=SC2086
    wait_for "cluster_state:ok and attached replicas" cluster_ready $ports
    first=${ports%% *}
    print_cluster "$dir" "$first"
}

# NODE lines (masters first) and the URL listing every node.
print_cluster() {
    local dir="$1" first="$2" roles port role mport
    roles=$(cluster_roles "$first" | sort -k2,2 -k1,1n)
    echo "$roles" | while read -r port role mport; do
        echo "NODE $port $(pid_of "$dir" "$port") $role $mport"
    done
    echo "URL $(url_scheme)-cluster://$(echo "$roles" | awk -v off="${TLS_DIR:+$TLS_OFFSET}" \
        '{ printf "%s127.0.0.1:%s", (NR > 1 ? "," : ""), $1 + off }')$(url_query)"
}

# --------------------------------------------------------------- sentinel

write_sentinel_conf() {
    local d="$1" port="$2"
    process_conf "$d" "$port" >"$d/sentinel.conf"
    cat >>"$d/sentinel.conf" <<EOF
sentinel announce-ip 127.0.0.1
sentinel monitor $MASTER_NAME 127.0.0.1 $(peer_port "$SENTINEL_MASTER_PORT") 2
sentinel down-after-milliseconds $MASTER_NAME $DOWN_AFTER
sentinel failover-timeout $MASTER_NAME $FAILOVER_TIMEOUT
sentinel parallel-syncs $MASTER_NAME 1
EOF
    if [ -n "$PASSWORD" ]; then
        printf 'sentinel auth-pass %s "%s"\n' "$MASTER_NAME" "$PASSWORD" >>"$d/sentinel.conf"
    fi
}

write_replica_conf() {
    write_data_conf "$1" "$2"
    echo "replicaof 127.0.0.1 $(peer_port "$SENTINEL_MASTER_PORT")" >>"$1/redis.conf"
}

replica_link_up() {
    rcli "$1" INFO replication | grep -q '^master_link_status:up'
}

# Ready: every Sentinel monitors the master as a master, knows the replica
# and the two other Sentinels.
sentinels_ready() {
    local s m
    for s in "$@"; do
        m=$(scli "$s" SENTINEL MASTER "$MASTER_NAME") || return 1
        echo "$m" | awk 'prev == "flags" && $0 != "master" { bad = 1 }
                         prev == "num-slaves" && $0 < 1 { bad = 1 }
                         prev == "num-other-sentinels" && $0 != 2 { bad = 1 }
                         { prev = $0 } END { exit bad }' || return 1
        echo "$m" | grep -qx num-other-sentinels || return 1
    done
}

sentinel_start() {
    local dir="$1" base="${2:-}" attempts=5 ok="" ports p s _
    [ -n "$base" ] && attempts=1
    for _ in $(seq "$attempts"); do
        ports=$(pick_ports 5 0 "$base") || die "no free ports"
        # shellcheck disable=SC2086
        set -- $ports
        SENTINEL_MASTER_PORT=$1
        if launch_all "$dir" write_data_conf "$1"; then
            if launch_all "$dir" write_replica_conf "$2"; then
                if launch_all "$dir" write_sentinel_conf "$3" "$4" "$5"; then
                    ok=1
                    break
                fi
            fi
        fi
        # shellcheck disable=SC2046
        stop_pids $(pids_under "$dir")
        for p in $ports; do rm -rf "${dir:?}/$p"; done
    done
    [ -n "$ok" ] || die "could not start the sentinel topology (ports taken?)"
    echo sentinel >"$dir/$MARKER"
    wait_for "the replica link" replica_link_up "$2"
    wait_for "Sentinels to know the replica and each other" sentinels_ready "$3" "$4" "$5"
    echo "NODE $1 $(pid_of "$dir" "$1") master -"
    echo "NODE $2 $(pid_of "$dir" "$2") replica $1"
    for s in "$3" "$4" "$5"; do echo "NODE $s $(pid_of "$dir" "$s") sentinel -"; done
    echo "URL $(url_scheme)-sentinel://127.0.0.1:$(peer_port "$3"),127.0.0.1:$(peer_port "$4"),127.0.0.1:$(peer_port "$5")/$MASTER_NAME$(url_query)"
}

# ---------------------------------------------------------------- common

# Live view: each node's pid and current role (ROLE), "down" when it does
# not answer, and the URL.
status() {
    local dir="$1" kind seeds="" sentinels="" d port pid mport role r
    [ -f "$dir/$MARKER" ] || die "$dir holds no topology"
    kind=$(cat "$dir/$MARKER")
    for d in "$dir"/[0-9]*; do
        [ -d "$d" ] || continue
        port=${d##*/}
        pid=$(pid_of "$dir" "$port")
        alive "$pid" || pid=0
        mport=-
        if [ -f "$d/sentinel.conf" ]; then
            role=sentinel
            [ "$(scli "$port" PING)" = PONG ] || role=down
            sentinels="$sentinels,127.0.0.1:$(peer_port "$port")"
        else
            r=$(rcli "$port" ROLE) || r=""
            case $r in
                master*) role=master ;;
                slave*) role=replica; mport=$(plain_port "$(echo "$r" | sed -n 3p)") ;;
                *) role=down ;;
            esac
            seeds="$seeds,127.0.0.1:$(peer_port "$port")"
        fi
        echo "NODE $port $pid $role $mport"
    done
    if [ "$kind" = cluster ]; then
        echo "URL $(url_scheme)-cluster://${seeds#,}$(url_query)"
    else
        echo "URL $(url_scheme)-sentinel://${sentinels#,}/$MASTER_NAME$(url_query)"
    fi
}

# Start one node of DIR again (after a kill), from its own config; a
# cluster node keeps its identity (nodes.conf), a data node under Sentinel
# comes back with whatever role its config says until the Sentinels
# reconfigure it.
restart() {
    local dir="$1" port="$2" d p
    d="$dir/$port"
    [ -f "$d/redis.conf" ] || [ -f "$d/sentinel.conf" ] || die "no node $port under $dir"
    for p in $(pids_under "$d"); do die "node $port is still running (pid $p)"; done
    launch "$d" "$port" || die "node $port did not start, see $d/redis.log"
    status "$dir" | grep "^NODE $port "
}

stop() {
    [ -d "$1" ] || return 0
    # shellcheck disable=SC2046
    stop_pids $(pids_under "$1")
}

# Remove DIR after stopping it, only when it holds a topology this script
# made, or holds nothing but such topologies (as `make cluster` leaves).
clean() {
    local dir="$1" e
    [ -d "$dir" ] || return 0
    if [ ! -f "$dir/$MARKER" ]; then
        [ -n "$(ls -A "$dir")" ] || die "$dir is empty and holds no topology; not removing it"
        for e in "$dir"/* "$dir"/.[!.]*; do
            [ -e "$e" ] || continue
            [ -f "$e/$MARKER" ] || die "$dir holds more than topologies ($e); not removing it"
        done
    fi
    stop "$dir"
    rm -rf "$dir"
}

# New topology directory: created if missing, refused if it holds one.
prepare_dir() {
    mkdir -p "$1"
    [ ! -f "$1/$MARKER" ] || die "$1 already holds a topology (stop/clean it first)"
}

# find -lname takes a pattern, so DIR must not hold pattern characters.
check_dir() {
    case $1 in *[][*?\\]*) die "directory names with * ? [ ] or \\ are not supported" ;; esac
}

check_port() {
    case $1 in
        ''|*[!0-9]*) usage ;;
    esac
}

[ $# -ge 1 ] || usage
command -v "$SERVER" >/dev/null 2>&1 || die "$SERVER not found (scripts/install-deps.sh)"
command -v "$CLI" >/dev/null 2>&1 || die "$CLI not found (scripts/install-deps.sh)"
case $1 in
    cluster|sentinel) if [ $# -ge 3 ]; then check_dir "$3"; fi ;;
    status|restart|stop|clean) if [ $# -ge 2 ]; then check_dir "$2"; fi ;;
esac
case $1 in
    cluster|sentinel)
        if [ $# -lt 3 ] || [ $# -gt 4 ] || [ "$2" != start ]; then usage; fi
        if [ $# -eq 4 ]; then check_port "$4"; fi
        prepare_dir "$3"
        STARTING=$(canon "$3")
        "$1_start" "$STARTING" "${4:-}"
        ;;
    status) [ $# -eq 2 ] || usage; status "$2" ;;
    restart) [ $# -eq 3 ] || usage; check_port "$3"; restart "$2" "$3" ;;
    stop) [ $# -eq 2 ] || usage; stop "$2" ;;
    clean) [ $# -eq 2 ] || usage; clean "$2" ;;
    -h|--help|help) usage ;;
    *) usage ;;
esac
