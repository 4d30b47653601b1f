#!/usr/bin/env bash
# bench/run.sh: download throughput of sglprov's fetch against its peers, on loopback.
#
# A real nginx (its own config in a temporary folder, sendfile on) serves random files on
# 127.0.0.1. The same files are downloaded by:
#   sglprov  bench/cmd/fetchbench (pkg/fetch: parallel ranges, sha256 while writing, fsync)
#   curl     curl URL | tee FILE | sha256sum, one file after another, digest compared
#   aria2c   aria2c -x8 -s8 with --checksum=sha-256=... per file (it hashes after download)
#   cat      the ceiling: cat of the same bytes (from the page cache) into the same file system
# Every tool ends with its files durable (pkg/fetch fsyncs; the others run `sync FILES`).
#
# Cases:
#   1  4 files of BENCH_SIZE_MB (default 512) MiB, no rate limit
#   2  2 files, nginx limit_rate 50m per connection (aria2c -x8, sglprov 8 connections)
#   3  re-run over files already present: sglprov's presence check (stat, size), against
#      sha256sum of the files (warm and cold page cache) and sglprov with VerifyFile
#   4  as case 2, but no sizes given: sglprov learns each size from the first answer and
#      then fans out (aria2c never takes sizes; its row is the same command as in case 2)
#   5  the fleet cache: the same 4 files from a real OCI registry (distribution 3 built by
#      make deps, or Debian's docker-registry; filesystem storage) and from nginx, side by
#      side: sglprov's fetch from nginx, then bench/cmd/cachebench pull (pkg/cache: lookup, then pkg/fetch through
#      the registry's client, as a download step on a cache hit); the push is a row too
#   6  a build step's time on a fleet cache hit against the build's own: a generated C
#      project (BENCH_BUILD_UNITS files, make -j) built by `sglprov apply` on node A, which
#      pushes it, then taken from the registry by node B (its own --root and state)
#   7  TLS offering h2 with a cap per TCP connection (BENCH_CONN_CAP_MB, default 8.7 MB/s, as
#      a CDN edge caps one): bench/cmd/benchcdn serves 2 files; sglprov (HTTP/1.1, 8
#      connections a file), sglprov-h2 (fetchbench -http2: the client negotiates h2, every
#      range a stream of one connection, as before), aria2c -x8 and curl (its own h2)
#   8  an outage of BENCH_OUTAGE_S (60) seconds in the middle: benchcdn (plain HTTP, 5 MB/s a
#      connection) serves 2 files; sglprov without the outage, then with the port refusing
#      connections (every connection cut) for the outage once half the bytes are served,
#      then answering 503 for it; the rows' seconds against the first say what it cost
#
# Environment: BENCH_SIZE_MB (512), BENCH_DIR (base for the temporary folder, /tmp),
# BENCH_OUT (also write the table there), BENCH_CASES ("1 2 3 4 5 6 7 8"), FETCHBENCH_FLAGS (more
# flags for fetchbench, e.g. "-chunk-mb 4 -buffer-mb 32"), BENCH_TOOLS (only these rows,
# e.g. "cat sglprov"), BENCH_BUILD_UNITS (16: C files of case 6), BENCH_CONN_CAP_MB (8.7:
# case 7's cap per TCP connection, 10^6 bytes/s), BENCH_OUTAGE_S (60: case 8's outage).
# Columns: wall seconds, MB/s (10^6 bytes per second of the bytes downloaded or hashed),
# CPU seconds (user+system of the command and its children, /usr/bin/time), peak RSS (the
# largest single process, /usr/bin/time -v), the load average when the row started.
set -euo pipefail

SIZE_MB=${BENCH_SIZE_MB:-512}
BASE=${BENCH_DIR:-/tmp}
CASES=${BENCH_CASES:-1 2 3 4 5 6 7 8}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

log() { printf '%s\n' "$*" >&2; }

# --- tools -----------------------------------------------------------------------------
missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
command -v aria2c >/dev/null 2>&1 || missing+=(aria2)
command -v curl >/dev/null 2>&1 || missing+=(curl)
[ -x /usr/bin/time ] || missing+=(time)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
if ((${#missing[@]})); then
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	if ! apt-get install -y -qq "${missing[@]}"; then
		# Some releases have no nginx-light: take plain nginx.
		apt-get install -y -qq "${missing[@]/nginx-light/nginx}"
	fi
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
command -v go >/dev/null 2>&1 || { log "go is needed to build the bench driver"; exit 1; }

# --- space and folders -----------------------------------------------------------------
need_kb=$(( (8 * SIZE_MB + 1024) * 1024 ))
avail_kb=$(df -Pk "$BASE" | awk 'NR==2 {print $4}')
if (( avail_kb < need_kb )); then
	log "not enough space in $BASE: need $((need_kb / 1024)) MiB, $((avail_kb / 1024)) MiB free"
	exit 1
fi
WORK=$(mktemp -d "$BASE/sglprov-bench.XXXXXX")
NGINX_PID=
REG_PID=
CDN_PID=
cleanup() {
	declare -F stop_cdn >/dev/null && stop_cdn
	if [ -n "$NGINX_PID" ] && kill -0 "$NGINX_PID" 2>/dev/null; then
		kill "$NGINX_PID"
	fi
	if [ -n "$REG_PID" ] && kill -0 "$REG_PID" 2>/dev/null; then
		kill "$REG_PID"
		wait "$REG_PID" 2>/dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT
chmod 755 "$WORK"
mkdir -p "$WORK/srv" "$WORK/dst" "$WORK/bin" "$WORK/logs"

log "building the drivers"
(cd "$ROOT" && GOTOOLCHAIN=local go build -o "$WORK/bin/fetchbench" ./bench/cmd/fetchbench &&
	GOTOOLCHAIN=local go build -o "$WORK/bin/cachebench" ./bench/cmd/cachebench &&
	GOTOOLCHAIN=local go build -o "$WORK/bin/benchcdn" ./bench/cmd/benchcdn &&
	GOTOOLCHAIN=local go build -o "$WORK/bin/oci-registry" ./test/ociregistry/cmd/oci-registry &&
	GOTOOLCHAIN=local CGO_ENABLED=1 go build -o "$WORK/bin/sglprov" ./cmd/sglprov)

log "generating 4 files of $SIZE_MB MiB"
for i in 1 2 3 4; do
	head -c "$((SIZE_MB << 20))" /dev/urandom >"$WORK/srv/f$i.bin"
	chmod 644 "$WORK/srv/f$i.bin"
	sha256sum "$WORK/srv/f$i.bin" | awk '{print $1}' >"$WORK/srv/f$i.sha256"
done
chmod 755 "$WORK/srv"

# --- nginx -----------------------------------------------------------------------------
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$WORK/nginx.conf" <<EOF
worker_processes 2;
pid $WORK/nginx.pid;
error_log $WORK/logs/nginx-error.log warn;
events { worker_connections 512; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 100000;
	default_type application/octet-stream;
	server {
		listen 127.0.0.1:$PORT;
		root $WORK/srv;
		location /limited/ {
			alias $WORK/srv/;
			limit_rate 50m;
		}
	}
}
EOF
"$NGINX" -p "$WORK" -c "$WORK/nginx.conf"
for _ in $(seq 50); do [ -s "$WORK/nginx.pid" ] && break; sleep 0.1; done
NGINX_PID=$(cat "$WORK/nginx.pid")
URL="http://127.0.0.1:$PORT"
curl -sSf -o /dev/null -r 0-0 "$URL/f1.bin" || { log "nginx does not answer"; exit 1; }

# --- registry --------------------------------------------------------------------------
# A real registry on a free loopback port, storage in $WORK/registry (started only for the
# cases that use it): the checkout's bin/registry (make deps) where it is built, Debian's
# docker-registry otherwise.
REG=
start_registry() {
	[ -n "$REG" ] && return 0
	log "registry: $(cd "$ROOT" && "$WORK/bin/oci-registry" --which)"
	(cd "$ROOT" && exec "$WORK/bin/oci-registry" --dir "$WORK/registry" --port-file "$WORK/registry.addr" 2>"$WORK/logs/registry.err") &
	REG_PID=$!
	for _ in $(seq 200); do [ -s "$WORK/registry.addr" ] && break; sleep 0.1; done
	[ -s "$WORK/registry.addr" ] || { log "the registry did not start:"; cat "$WORK/logs/registry.err" >&2; exit 1; }
	REG=$(cat "$WORK/registry.addr")
	log "registry at $REG"
}

# build_project DIR: a C project of BENCH_BUILD_UNITS (16) files with enough arithmetic for
# the optimizer to chew on, and a Makefile that links them into out/prog.
build_project() {
	local dir=$1 units=${BENCH_BUILD_UNITS:-16}
	mkdir -p "$dir"
	python3 - "$dir" "$units" <<'EOF'
import sys
d, units = sys.argv[1], int(sys.argv[2])
for n in range(1, units + 1):
    with open(f"{d}/u{n}.c", "w") as f:
        f.write("#include <stdint.h>\n")
        for k in range(40):
            f.write(f"uint64_t u{n}_f{k}(uint64_t x) {{\n")
            for j in range(60):
                f.write(f"  x = (x * {6364136223846793005 + j + k}ULL + {1442695040888963407 ^ j}ULL) ^ (x >> {(j % 31) + 1});\n")
                if k > 0 and j % 20 == 0:
                    f.write(f"  if (x % {j + 3} == {j % 2}) x += u{n}_f{k - 1}(x >> 60);\n")
            f.write("  return x;\n}\n")
with open(f"{d}/main.c", "w") as f:
    f.write("int main(void) { return 0; }\n")
with open(f"{d}/Makefile", "w") as f:
    f.write("SRCS := $(wildcard u*.c)\nOBJS := $(SRCS:%.c=obj/%.o)\n"
            "out/prog: $(OBJS) main.c\n\tmkdir -p out && $(CC) -O2 -o $@ main.c $(OBJS)\n"
            "obj/%.o: %.c\n\tmkdir -p obj && $(CC) -O2 -c -o $@ $<\n")
EOF
}

# --- benchcdn --------------------------------------------------------------------------
# start_cdn ARGS...: bench/cmd/benchcdn on a free loopback port, serving $WORK/srv; sets CDN
# (its base URL). stop_cdn stops it.
CDN=
start_cdn() {
	rm -f "$WORK/cdn.addr"
	"$WORK/bin/benchcdn" -dir "$WORK/srv" -addr-file "$WORK/cdn.addr" -cert-file "$WORK/cdn.pem" "$@" 2>>"$WORK/logs/benchcdn.err" &
	CDN_PID=$!
	for _ in $(seq 100); do [ -s "$WORK/cdn.addr" ] && break; sleep 0.1; done
	[ -s "$WORK/cdn.addr" ] || { log "benchcdn did not start:"; cat "$WORK/logs/benchcdn.err" >&2; exit 1; }
	CDN=$(cat "$WORK/cdn.addr")
}
stop_cdn() {
	if [ -n "$CDN_PID" ] && kill -0 "$CDN_PID" 2>/dev/null; then
		kill "$CDN_PID"
		wait "$CDN_PID" 2>/dev/null || true
	fi
	CDN_PID=
}
# cdn_lists N: $WORK/list.cdn (fetchbench) and $WORK/aria.cdn (aria2c) for f1..fN at $CDN.
cdn_lists() {
	local n=$1 i sum
	: >"$WORK/list.cdn"
	: >"$WORK/aria.cdn"
	for i in $(seq "$n"); do
		sum=$(cat "$WORK/srv/f$i.sha256")
		echo "$CDN/f$i.bin $sum $((SIZE_MB << 20)) f$i.bin" >>"$WORK/list.cdn"
		printf '%s\n  out=f%d.bin\n  checksum=sha-256=%s\n' "$CDN/f$i.bin" "$i" "$sum" >>"$WORK/aria.cdn"
	done
}

# --- helpers ---------------------------------------------------------------------------
RESULTS=$WORK/results.tsv
: >"$RESULTS"

# lists N PREFIX [nosize]: writes $WORK/list.N.PREFIX (fetchbench) and $WORK/aria.N.PREFIX
# (aria2c); with "nosize", the fetchbench list gives every size as -1 (unknown), and its
# key is N.PREFIX.nosize.
lists() {
	local n=$1 prefix=$2 nosize=${3:-} i key size
	key=$n${prefix//\//_}${nosize:+.nosize}
	size=$((SIZE_MB << 20))
	[ -z "$nosize" ] || size=-1
	: >"$WORK/list.$key"
	: >"$WORK/aria.$key"
	for i in $(seq "$n"); do
		local sum
		sum=$(cat "$WORK/srv/f$i.sha256")
		echo "$URL$prefix/f$i.bin $sum $size f$i.bin" >>"$WORK/list.$key"
		printf '%s\n  out=f%d.bin\n  checksum=sha-256=%s\n' "$URL$prefix/f$i.bin" "$i" "$sum" >>"$WORK/aria.$key"
	done
}

clean_dst() { rm -rf "$WORK/dst"; mkdir -p "$WORK/dst"; sync -f "$WORK" 2>/dev/null || sync; }

# drop_cache FILES: evict these files (only these) from the page cache.
drop_cache() {
	sync "$@"
	python3 - "$@" <<'EOF'
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
EOF
}

# measure CASE TOOL BYTES SCRIPT: runs SCRIPT under /usr/bin/time -v, records a row.
measure() {
	local case=$1 tool=$2 bytes=$3 script=$4 tf load t0 t1
	if [ -n "${BENCH_TOOLS:-}" ] && [[ " $BENCH_TOOLS " != *" $tool "* ]]; then return 0; fi
	tf=$WORK/logs/time.$case.$tool
	load=$(cut -d' ' -f1 /proc/loadavg)
	t0=$(date +%s.%N)
	if ! /usr/bin/time -v -o "$tf" bash -euo pipefail -c "$script" >"$WORK/logs/out.$case.$tool" 2>&1; then
		log "case $case, $tool failed:"
		tail -20 "$WORK/logs/out.$case.$tool" >&2
		exit 1
	fi
	t1=$(date +%s.%N)
	local user sys rss
	user=$(awk -F': ' '/User time/ {print $2}' "$tf")
	sys=$(awk -F': ' '/System time/ {print $2}' "$tf")
	rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tf")
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$case" "$tool" "$(echo "$t1 - $t0" | bc -l)" "$bytes" \
		"$(echo "$user + $sys" | bc -l)" "$rss" "$load" >>"$RESULTS"
	log "$(tail -1 "$RESULTS")"
}

curl_script() { # N PREFIX
	local n=$1 prefix=$2 i s=""
	for i in $(seq "$n"); do
		s+="h=\$(curl -sSf '$URL$prefix/f$i.bin' | tee '$WORK/dst/f$i.bin' | sha256sum | cut -d' ' -f1); "
		s+="[ \"\$h\" = \"$(cat "$WORK/srv/f$i.sha256")\" ] || { echo 'digest mismatch f$i'; exit 1; }; "
	done
	s+="sync $WORK/dst/*.bin"
	echo "$s"
}
cat_script() { # N
	local n=$1 i s=""
	for i in $(seq "$n"); do s+="cat '$WORK/srv/f$i.bin' >'$WORK/dst/f$i.bin'; "; done
	s+="sync $WORK/dst/*.bin"
	echo "$s"
}
aria_script() { # N PREFIX
	echo "aria2c -q -i '$WORK/aria.$1${2//\//_}' -d '$WORK/dst' -j $1 -x 8 -s 8 --file-allocation=falloc --allow-overwrite=true --auto-file-renaming=false --summary-interval=0 && sync $WORK/dst/*.bin"
}
sglprov_script() { # N PREFIX [extra flags]
	echo "'$WORK/bin/fetchbench' -q -list '$WORK/list.$1${2//\//_}' -dest '$WORK/dst' -conns 8 ${FETCHBENCH_FLAGS:-} ${3:-}"
}
sglprov_nosize_script() { # N PREFIX
	echo "'$WORK/bin/fetchbench' -q -list '$WORK/list.$1${2//\//_}.nosize' -dest '$WORK/dst' -conns 8 ${FETCHBENCH_FLAGS:-}"
}

B=$((SIZE_MB << 20))
uptime >&2
for c in $CASES; do
	case $c in
	1)
		lists 4 ""
		for tool in cat sglprov curl aria2c; do
			clean_dst
			case $tool in
			cat) measure 1 cat $((4 * B)) "$(cat_script 4)" ;;
			sglprov) measure 1 sglprov $((4 * B)) "$(sglprov_script 4 "")" ;;
			curl) measure 1 curl $((4 * B)) "$(curl_script 4 "")" ;;
			aria2c) measure 1 aria2c $((4 * B)) "$(aria_script 4 "")" ;;
			esac
		done
		;;
	2)
		lists 2 /limited
		for tool in cat sglprov aria2c curl; do
			clean_dst
			case $tool in
			cat) measure 2 cat $((2 * B)) "$(cat_script 2)" ;;
			sglprov) measure 2 sglprov $((2 * B)) "$(sglprov_script 2 /limited)" ;;
			aria2c) measure 2 aria2c $((2 * B)) "$(aria_script 2 /limited)" ;;
			curl) measure 2 curl $((2 * B)) "$(curl_script 2 /limited)" ;;
			esac
		done
		;;
	3)
		lists 4 ""
		clean_dst
		"$WORK/bin/fetchbench" -q -list "$WORK/list.4" -dest "$WORK/dst" -conns 8
		sync "$WORK"/dst/*.bin
		sums=""
		for i in 1 2 3 4; do sums+="$(cat "$WORK/srv/f$i.sha256")  $WORK/dst/f$i.bin"$'\n'; done
		printf '%s' "$sums" >"$WORK/dst.sha256"
		measure 3 sglprov-present 0 "$(sglprov_script 4 "")"
		measure 3 sha256sum-warm $((4 * B)) "sha256sum --quiet -c '$WORK/dst.sha256'"
		drop_cache "$WORK"/dst/*.bin
		measure 3 sha256sum-cold $((4 * B)) "sha256sum --quiet -c '$WORK/dst.sha256'"
		measure 3 sglprov-verify-warm $((4 * B)) "$(sglprov_script 4 "" -verify)"
		;;
	4)
		lists 2 /limited
		lists 2 /limited nosize
		for tool in cat sglprov aria2c; do
			clean_dst
			case $tool in
			cat) measure 4 cat $((2 * B)) "$(cat_script 2)" ;;
			sglprov) measure 4 sglprov $((2 * B)) "$(sglprov_nosize_script 2 /limited)" ;;
			aria2c) measure 4 aria2c $((2 * B)) "$(aria_script 2 /limited)" ;;
			esac
		done
		;;
	5)
		lists 4 ""
		start_registry
		clean_dst
		measure 5 registry-push $((4 * B)) "'$WORK/bin/cachebench' push -repo '$REG/bench/weights' -tag bench -src '$WORK/srv' -list '$WORK/list.4'"
		# Twice each, alternating: on a shared host the load moves between rows.
		for tool in sglprov sglprov-registry sglprov sglprov-registry; do
			clean_dst
			case $tool in
			sglprov) measure 5 sglprov $((4 * B)) "$(sglprov_script 4 "")" ;;
			sglprov-registry) measure 5 sglprov-registry $((4 * B)) "'$WORK/bin/cachebench' pull -repo '$REG/bench/weights' -tag bench -dest '$WORK/dst' -conns 8" ;;
			esac
		done
		clean_dst
		;;
	6)
		start_registry
		build_project "$WORK/build-src"
		cat >"$WORK/build.yaml" <<EOF
apiVersion: sglprov/v1
name: bench-build
vars: {registry: "$REG", push: "false"}
cache: {oci: "{{ .vars.registry }}/bench/build", push: "{{ .vars.push }}"}
steps:
  - name: build
    build:
      dir: /src
      argv: [sh, -c, 'make -j"\$MAX_JOBS"']
      env: {TORCH_CUDA_ARCH_LIST: "none"}
      outputs: ["out/prog"]
      exclude: ["obj"]
EOF
		for node in a b; do mkdir -p "$WORK/node-$node"; cp -r "$WORK/build-src" "$WORK/node-$node/src"; done
		measure 6 apply-build 0 "'$WORK/bin/sglprov' apply -f '$WORK/build.yaml' --root '$WORK/node-a' --state-dir '$WORK/node-a/state' --set push=true"
		measure 6 apply-cache-hit 0 "'$WORK/bin/sglprov' apply -f '$WORK/build.yaml' --root '$WORK/node-b' --state-dir '$WORK/node-b/state'"
		cmp "$WORK/node-a/src/out/prog" "$WORK/node-b/src/out/prog"
		python3 - "$WORK/node-a/state" "$WORK/node-b/state" "$WORK/node-a/src/out/prog" >"$WORK/build-steps.txt" <<'EOF'
import glob, json, os, sys
a, b, prog = sys.argv[1:]
def step(d):
    rep = json.load(open(sorted(glob.glob(d + "/runs/*/report.json"))[-1]))
    return rep["steps"][0]
sa, sb = step(a), step(b)
assert sa["result"] == "ok" and not sa.get("from_cache"), sa
assert sb["result"] == "ok" and sb.get("from_cache"), sb
ta, tb = sa["duration_ns"] / 1e9, sb["duration_ns"] / 1e9
print(f"build step {ta:.2f} s on node A (built), {tb:.2f} s on node B (from the cache, artifact {sb['from_cache'][:19]}): "
      f"{ta / tb:.0f}x; output {os.path.getsize(prog) / 1e6:.1f} MB")
EOF
		;;
	7)
		start_cdn -tls -conn-rate-mb "${BENCH_CONN_CAP_MB:-8.7}"
		cdn_lists 2
		ca=$WORK/cdn.pem
		for tool in sglprov sglprov-h2 aria2c curl; do
			clean_dst
			case $tool in
			sglprov) measure 7 sglprov $((2 * B)) "SSL_CERT_FILE='$ca' '$WORK/bin/fetchbench' -q -list '$WORK/list.cdn' -dest '$WORK/dst' -conns 8" ;;
			sglprov-h2) measure 7 sglprov-h2 $((2 * B)) "SSL_CERT_FILE='$ca' '$WORK/bin/fetchbench' -q -http2 -list '$WORK/list.cdn' -dest '$WORK/dst' -conns 8" ;;
			aria2c) measure 7 aria2c $((2 * B)) "aria2c -q -i '$WORK/aria.cdn' -d '$WORK/dst' -j 2 -x 8 -s 8 --ca-certificate='$ca' --file-allocation=falloc --allow-overwrite=true --auto-file-renaming=false --summary-interval=0 && sync $WORK/dst/*.bin" ;;
			curl)
				s=""
				for i in 1 2; do
					s+="h=\$(curl -sSf --cacert '$ca' '$CDN/f$i.bin' | tee '$WORK/dst/f$i.bin' | sha256sum | cut -d' ' -f1); "
					s+="[ \"\$h\" = \"$(cat "$WORK/srv/f$i.sha256")\" ] || { echo 'digest mismatch f$i'; exit 1; }; "
				done
				measure 7 curl $((2 * B)) "${s}sync $WORK/dst/*.bin"
				;;
			esac
		done
		stop_cdn
		;;
	8)
		outage=${BENCH_OUTAGE_S:-60}
		for tool in sglprov sglprov-outage-refused sglprov-outage-503; do
			case $tool in
			sglprov) start_cdn -conn-rate-mb 5 ;;
			sglprov-outage-refused) start_cdn -conn-rate-mb 5 -outage "${outage}s" -outage-after-mb "$SIZE_MB" -outage-mode refuse ;;
			sglprov-outage-503) start_cdn -conn-rate-mb 5 -outage "${outage}s" -outage-after-mb "$SIZE_MB" -outage-mode 503 ;;
			esac
			cdn_lists 2
			clean_dst
			measure 8 "$tool" $((2 * B)) "'$WORK/bin/fetchbench' -list '$WORK/list.cdn' -dest '$WORK/dst' -conns 8"
			stop_cdn
		done
		;;
	esac
done

# --- table -----------------------------------------------------------------------------
table=$(awk -F'\t' '
	{ n++; c[n]=$1; t[n]=$2; s[n]=$3; b[n]=$4; cpu[n]=$5; rss[n]=$6; ld[n]=$7
	  if ($2=="cat") ceil[$1]=$4/$3; if ($2=="sglprov") me[$1]=$4/$3 }
	END {
		print "| case | tool | seconds | MB/s | CPU s | peak RSS MB | load | sglprov speed / this | fraction of ceiling |"
		print "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
		for (i=1; i<=n; i++) {
			mbs = b[i] > 0 ? sprintf("%.0f", b[i]/s[i]/1e6) : "-"
			ratio = (me[c[i]] > 0 && b[i] > 0 && t[i] != "sglprov") ? sprintf("%.2fx", me[c[i]]/(b[i]/s[i])) : "-"
			frac = (ceil[c[i]] > 0 && b[i] > 0) ? sprintf("%.2f", (b[i]/s[i])/ceil[c[i]]) : "-"
			printf "| %s | %s | %.2f | %s | %.2f | %.0f | %s | %s | %s |\n", c[i], t[i], s[i], mbs, cpu[i], rss[i]/1024, ld[i], ratio, frac
		}
	}' "$RESULTS")
notes=$(awk -F'\t' '$1==5 && $2=="sglprov" {ob+=$4; os+=$3} $1==5 && $2=="sglprov-registry" {rb+=$4; rs+=$3}
	END { if (os > 0 && rs > 0) printf "case 5: registry / origin (nginx) = %.2fx (bytes over seconds of both rows of each)", (rb/rs)/(ob/os) }' "$RESULTS")
if [ -s "$WORK/build-steps.txt" ]; then notes+=$'\n'"case 6: $(cat "$WORK/build-steps.txt")"; fi
outage_note=$(awk -F'\t' -v o="${BENCH_OUTAGE_S:-60}" '$1==8 && $2=="sglprov" {base=$3} $1==8 && $2 ~ /outage/ {n++; t[n]=$2; s[n]=$3}
	END { for (i=1; i<=n; i++) printf "%scase 8: %s %.1f s against %.1f s without the outage: %.1f s more for a %d s outage", (i>1?"\n":""), t[i], s[i], base, s[i]-base, o }' "$RESULTS")
if [ -n "$outage_note" ]; then notes+=${notes:+$'\n'}$outage_note; fi
if [ -n "$notes" ]; then table+=$'\n\n'"$notes"; fi
echo "$table"
if [ -n "${BENCH_OUT:-}" ]; then echo "$table" >"$BENCH_OUT"; fi
uptime >&2
