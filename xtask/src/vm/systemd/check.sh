#!/bin/bash
# The systemd guest's checks (`cargo xtask vm --systemd`, xtask/src/vm/systemd.rs).
#
# systemd runs this once the guest is up (systemd.run= on the kernel command
# line) from the payload disk mounted at $1, then powers the guest off. Each
# check reports one protocol line on ttyS1, which qemu writes to a file on
# the host:
#   SHEDDER-VM check NAME pass|fail DETAIL
#   SHEDDER-VM done
# Every wait is bounded; the host bounds the whole boot as well.
set -u
payload=$1
exec >/dev/console 2>&1

iface=shed0
peer=shed1
netns=client
server=10.77.0.1
client=10.77.0.2
steady=$server:8080
closed=$server:8081
chat=$server:8000
probe=$payload/shedder-connect-probe
metrics=127.0.0.1:9465
backend_user=backend
backend_group=inference
fail_open_after_ms=$(sed -n 's/^fail_open_after_ms *= *\([0-9]*\).*/\1/p' "$payload/shedder.toml")

# One protocol line, whatever newlines the detail holds.
report() {
    local line
    line="SHEDDER-VM $(tr '\n' ' ' <<<"$*")"
    echo "$line" >/dev/ttyS1
    echo "==== $line"
}

# run_check NAME FUNCTION: the function sets $detail and returns 0 for a pass.
run_check() {
    local name=$1
    detail=""
    echo "==== check $name"
    if "$2"; then
        report check "$name" pass "$detail"
    else
        report check "$name" fail "$detail"
    fi
}

# wait_for SECONDS COMMAND...: true once COMMAND succeeds, false after SECONDS.
wait_for() {
    local until=$(($(date +%s) + $1))
    shift
    until "$@"; do
        [ "$(date +%s)" -ge "$until" ] && return 1
        sleep 0.2
    done
}

now_ms() {
    date +%s%3N
}

# field NAME LINE: the value of NAME=VALUE in a probe's summary line.
field() {
    sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<<"$2"
}

in_client() {
    ip netns exec "$netns" "$@"
}

main_pid() {
    systemctl show --property MainPID --value shedder
}

# For the checks that need the service up: a check after a failed start fails at once.
running() {
    [ "$(main_pid)" != 0 ] || {
        detail="the service is not running ($(systemctl is-active shedder))"
        return 1
    }
}

journal() {
    journalctl --unit shedder --output cat --no-pager "$@"
}

xdp_program() {
    ip -details link show dev "$iface" | sed -n 's/.*prog\/xdp id \([0-9]*\).*/\1/p'
}

check_install() {
    local module
    for module in "$payload"/modules/*.ko; do
        [ -e "$module" ] || continue
        insmod "$module" || { detail="insmod $module failed"; return 1; }
    done
    if ! DEBIAN_FRONTEND=noninteractive dpkg --install "$payload/shedder.deb"; then
        detail="dpkg --install failed"
        return 1
    fi
    getent passwd shedder >/dev/null || { detail="the user shedder was not created"; return 1; }
    local pins
    pins=$(stat --format '%U %a' /sys/fs/bpf/shedder 2>&1)
    [ "$pins" = "shedder 700" ] || { detail="/sys/fs/bpf/shedder: $pins (want it owned by shedder, 700)"; return 1; }
    # What an administrator does next: the config, the interface and options
    # (systemctl edit): /metrics on a port of its own, and the control socket
    # opened to the group a backend's user is in (the user shedder too).
    install -m 0644 "$payload/shedder.toml" /etc/shedder/shedder.toml
    groupadd --system "$backend_group" && useradd --system --no-create-home --gid "$backend_group" "$backend_user" &&
        usermod --append --groups "$backend_group" shedder || { detail="could not add the backend's user and group"; return 1; }
    mkdir -p /etc/systemd/system/shedder.service.d
    printf '[Service]\nEnvironment=SHEDDER_IFACE=%s\nEnvironment="SHEDDER_OPTS=--metrics-addr %s --socket-group %s"\n' \
        "$iface" "$metrics" "$backend_group" >/etc/systemd/system/shedder.service.d/iface.conf
    systemctl daemon-reload
    # `systemctl enable --now`, the documented path, as its two halves: start is the next check.
    systemctl enable shedder || { detail="systemctl enable failed"; return 1; }
    detail="$(dpkg-query --show --showformat '${Package} ${Version}' shedder); user shedder; /sys/fs/bpf/shedder: $pins; unit $(systemctl is-enabled shedder)"
    return 0
}

# The interface the service attaches to, a client behind it in a network
# namespace of its own, and a backend listening on the service's side.
bed() {
    ip netns add "$netns" &&
        ip link add "$iface" type veth peer name "$peer" netns "$netns" &&
        ip addr add "$server/24" dev "$iface" &&
        ip link set "$iface" up &&
        in_client ip addr add "$client/24" dev "$peer" &&
        in_client ip link set "$peer" up &&
        in_client ip link set lo up || return 1
    "$probe" serve "$steady" "$closed" "$chat" &
}

attached_by() {
    journal "_PID=$1" | grep -q ' attached '
}

check_start() {
    bed || { detail="could not build the network namespace and veth pair"; return 1; }
    if ! systemctl start shedder; then
        journal --output short-monotonic | tail -n 30
        detail="systemctl start failed: $(systemctl show --property Result --value shedder); $(journal | tail -n 3 | tr '\n' ' ')"
        return 1
    fi
    # Type=notify: start returns once the daemon says it is ready, which it
    # does only after attaching.
    local at_start
    at_start=$(xdp_program)
    if [ -z "$at_start" ] || [ "$(systemctl show --property Type --value shedder)" != notify ]; then
        detail="systemctl start returned with no XDP program on $iface (unit type $(systemctl show --property Type --value shedder))"
        return 1
    fi
    local pid
    pid=$(main_pid)
    if ! wait_for 90 attached_by "$pid"; then
        detail="no 'attached' line from the daemon within 90 s: $(journal | tail -n 5)"
        return 1
    fi
    local program status
    program=$(xdp_program)
    status=$(shedder ctl --iface "$iface" status | head -n 1)
    echo "$status"
    if [ -z "$program" ] || ! grep -q "mode enforce" <<<"$status" || ! grep -q "on $iface" <<<"$status"; then
        detail="ip link shows XDP program '${program}'; shedder ctl status: $status"
        return 1
    fi
    # SHEDDER_OPTS reached the daemon: the backend's user reaches the socket,
    # and /metrics answers where the option put it.
    local as_backend series
    as_backend=$(runuser -u "$backend_user" -- shedder ctl --iface "$iface" status 2>&1 | head -n 1)
    series=$(scrape_metrics | grep -c '^shedder_syns_total')
    if ! grep -q "mode enforce" <<<"$as_backend" || [ "$series" -lt 1 ]; then
        detail="as $backend_user: $as_backend; $(ls -l "/run/shedder/$iface.sock"); shedder_syns_total series on $metrics: $series"
        return 1
    fi
    detail="$(journal "_PID=$pid" | grep -o 'attachment=.*' | head -n 1); ip link: prog/xdp id $program; ctl status: ${status#shedder }; \
as $backend_user too; /metrics on $metrics"
}

# GET /metrics from $metrics (bash's /dev/tcp: the guest has no HTTP client).
scrape_metrics() {
    local host=${metrics%:*} port=${metrics##*:}
    (
        exec 3<>"/dev/tcp/$host/$port" || exit 1
        printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$metrics" >&3
        timeout 5 cat <&3
    )
}

check_capabilities() {
    running || return 1
    local pid
    pid=$(main_pid)
    local status=/proc/$pid/status
    grep -E '^(Uid|Cap[A-Za-z]+|NoNewPrivs):' "$status"
    local got want
    got=$(grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' "$status" | tr -s '\t ' ' ' | tr '\n' ' ')
    # CAP_NET_ADMIN (12), CAP_PERFMON (38), CAP_BPF (39): the unit's bounding
    # set, which the daemon cannot shrink further without CAP_SETPCAP.
    want="CapInh: 0000000000000000 CapPrm: 0000000000000000 CapEff: 0000000000000000 CapBnd: 000000c000001000 CapAmb: 0000000000000000 NoNewPrivs: 1 "
    local uid
    uid=$(awk '/^Uid:/ {print $2}' "$status")
    detail="pid $pid, uid $uid, $got"
    [ "$got" = "$want" ] && [ "$uid" = "$(id -u shedder)" ]
}

check_security() {
    local host guest
    host=$(sed -n 's/.*Overall exposure level for shedder.service: \([0-9.]*\).*/\1/p' "$payload/host-security.txt")
    systemd-analyze security --no-pager shedder.service >/tmp/security.txt 2>&1
    guest=$(sed -n 's/.*Overall exposure level for shedder.service: \([0-9.]*\).*/\1/p' /tmp/security.txt)
    tail -n 3 /tmp/security.txt
    # The lines that differ, for the console (the score is what must agree).
    diff <(grep -E '^[✓✗ ] ' "$payload/host-security.txt" | sort) <(grep -E '^[✓✗ ] ' /tmp/security.txt | sort)
    detail="exposure here ${guest:-none}, on the host ${host:-none} ($(systemd-analyze --version | head -n 1))"
    [ -n "$guest" ] && [ "$guest" = "$host" ]
}

new_daemon_attached() {
    local pid
    pid=$(main_pid)
    [ "$pid" != 0 ] && [ "$pid" != "$1" ] && attached_by "$pid"
}

# across_takeover WHAT COMMAND...: runs COMMAND, which must replace the
# daemon, while a client connects to the steady class every 20 ms; waits for
# the new daemon to attach and take the pinned link over. Sets $detail and
# $closed_after (a probe of the drained class afterwards); false if no new
# daemon took over, or a connection was refused or timed out.
across_takeover() {
    local what=$1 old stop=/run/shedder-vm-stop out=/run/shedder-vm-loop
    shift
    old=$(main_pid)
    rm -f "$stop"
    in_client "$probe" connect "$steady" --every-ms 20 --timeout-ms 1000 --for-s 150 --stop-file "$stop" >"$out" &
    local loop=$!
    sleep 1
    local began took attached=0
    began=$(now_ms)
    "$@"
    wait_for 120 new_daemon_attached "$old" || attached=1
    took=$(($(now_ms) - began))
    sleep 1
    touch "$stop"
    wait "$loop"
    local loop_out
    loop_out=$(cat "$out")
    closed_after=$(in_client "$probe" connect "$closed" --count 1 --timeout-ms 500)
    detail="$what to attached in $took ms; steady loop: $loop_out; the closed class after: $closed_after"
    if [ "$attached" != 0 ]; then
        detail="no new daemon attached within 120 s of $what: $(journal | tail -n 5)"
        return 1
    fi
    journal "_PID=$(main_pid)" | grep -q 'swapped this program into the pinned link' || {
        detail="$detail; the new daemon did not take over the pinned link"
        return 1
    }
    [ "$(field admitted "$loop_out")" -gt 0 ] && [ "$(field refused "$loop_out")" = 0 ] &&
        [ "$(field timed_out "$loop_out")" = 0 ] && [ "$(field errors "$loop_out")" = 0 ]
}

check_restart() {
    running || return 1
    # Drain the closed class: its one token admits, then it drops.
    local drained
    drained=$(in_client "$probe" connect "$closed" --count 2 --every-ms 0 --timeout-ms 500)
    if [ "$(field admitted "$drained")" != 1 ] || [ "$(field timed_out "$drained")" != 1 ]; then
        detail="the closed class should admit one connection, then drop: $drained"
        return 1
    fi
    # A bucket started anew would admit its one token again.
    across_takeover "restart" systemctl restart shedder && [ "$(field timed_out "$closed_after")" = 1 ]
}

# The package's next revision over the running service: its postinst
# restarts it (try-restart), and the new daemon takes the program over.
check_upgrade() {
    running || return 1
    local want
    want=$(dpkg-deb --field "$payload/shedder-upgrade.deb" Version)
    across_takeover "dpkg --install of $want" dpkg --install "$payload/shedder-upgrade.deb" </dev/null || return 1
    local now
    now=$(dpkg-query --show --showformat '${Version}' shedder)
    detail="$detail; installed: $now"
    [ "$now" = "$want" ] && [ "$(field timed_out "$closed_after")" = 1 ] &&
        cmp -s "$payload/shedder.toml" /etc/shedder/shedder.toml || {
        detail="$detail; the drained class, the version or the edited config was not kept"
        return 1
    }
}

# An upgrade whose restart fails is said by the package, not hidden: here
# the restart fails on a config broken by hand (a conffile, so the package
# keeps the edit). Mended, the service starts again by itself.
check_failed_upgrade() {
    running || return 1
    local good=/run/shedder-vm-good.toml out rc=0 old
    old=$(main_pid)
    cp /etc/shedder/shedder.toml "$good"
    echo 'mode = ' >>/etc/shedder/shedder.toml
    out=$(dpkg --install "$payload/shedder-upgrade.deb" </dev/null 2>&1) || rc=$?
    cp "$good" /etc/shedder/shedder.toml
    local said
    said=$(grep '^shedder: the service did not start again' <<<"$out")
    detail="dpkg exit $rc; said: ${said:-nothing}"
    [ "$rc" = 0 ] && [ -n "$said" ] || return 1
    wait_for 30 new_daemon_attached "$old" || {
        detail="$detail; the mended service did not start again: $(journal | tail -n 3)"
        return 1
    }
    detail="$detail; mended, the service started again by itself"
}

# One round of overload for the chat class: jobs reported late, and new connections.
overload_chat() {
    local samples="[" i
    for i in $(seq 1 30); do
        samples="$samples{\"class\":\"chat\",\"queue_age_ms\":2500,\"service_ms\":400},"
    done
    shedder ctl --iface "$iface" sample "${samples%,}]" >/dev/null
    in_client "$probe" connect "$chat" --count 40 --every-ms 10 --timeout-ms 200 >/dev/null
    journal | grep -q 'budget chat'
}

check_journal() {
    running || return 1
    wait_for 90 overload_chat
    local attached decision
    attached=$(journal | grep ' attached ' | tail -n 1)
    decision=$(journal | grep 'budget chat' | head -n 1)
    detail="attach: ${attached:-none}; decision: ${decision:-none}"
    detail=${detail:0:600}
    [ -n "$attached" ] && [ -n "$decision" ]
}

check_stop() {
    running || return 1
    local program began stopped after_stop
    program=$(xdp_program)
    began=$(now_ms)
    systemctl stop shedder
    stopped=$(($(now_ms) - began))
    after_stop=$(xdp_program)
    # Attempts every 100 ms, each given 200 ms: the first admitted one comes
    # at most that long after the watchdog has failed open.
    local every=100 timeout=200 probed
    probed=$(in_client "$probe" connect "$closed" --until-admitted --every-ms $every --timeout-ms $timeout --for-s 60)
    local first failed_open bound=$((fail_open_after_ms + every + timeout))
    first=$(field first_admitted_ms "$probed")
    detail="systemctl stop took $stopped ms; program $program, after the stop: ${after_stop:-none} (pinned: $(ls /sys/fs/bpf/shedder 2>/dev/null | tr '\n' ' ')); closed class: $probed"
    [ -n "$program" ] && [ "$after_stop" = "$program" ] || {
        detail="$detail; the program did not stay attached"
        return 1
    }
    [ "$first" != none ] || return 1
    failed_open=$((stopped + first))
    detail="$detail; failing open $failed_open ms after the stop began (watchdog: $fail_open_after_ms ms; bound $bound ms)"
    # Still dropping right after the stop: failing open is the watchdog's doing.
    [ "$(field timed_out "$probed")" -gt 0 ] && [ "$failed_open" -le "$bound" ]
}

report begin "$(uname -r) $(systemctl --version | head -n 1)"
# The default target waits for this very service (systemd-run-generator(8)),
# which runs once basic.target is reached: the system never reads "running".
echo "jobs still queued: $(systemctl list-jobs --no-legend | wc -l); failed units: $(systemctl --failed --no-legend | wc -l)"
systemctl --failed --no-pager --no-legend
run_check install check_install
run_check start check_start
run_check capabilities check_capabilities
run_check security check_security
run_check restart check_restart
run_check upgrade check_upgrade
run_check failed_upgrade check_failed_upgrade
run_check journal check_journal
run_check stop check_stop
echo "==== journalctl -u shedder"
journal --output short-monotonic | tail -n 40
report done
