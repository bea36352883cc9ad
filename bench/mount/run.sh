#!/usr/bin/env bash
# Reproduce the mount comparison: `datahub mount s3://bench` beside local disk, rclone (full cache)
# and s3fs (with cache) on the peers harness (bench/peers), same data, same workloads, one run.
#
#   bench/mount/run.sh                 # setup (once; minutes) + all workloads, 1 rep
#   REPS=3 WORKLOADS=epoch,listing bench/mount/run.sh
#
# Uses its own work dir and moto port so it never collides with another run of the harness.
# Results: $BENCH_WORK/results/raw.jsonl and report.md (copy figures to docs/benchmarks/mount.md).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PEERS="$REPO/bench/peers"
export BENCH_WORK="${BENCH_WORK:-/var/tmp/peers-bench-mount}"
export BENCH_ENDPOINT="${BENCH_ENDPOINT:-http://127.0.0.1:5012}"
source "$PEERS/env.sh"
REPS="${REPS:-1}"
WORKLOADS="${WORKLOADS:-epoch,listing,large_seq,large_rand,torch}"
PEER_CONFIGS="${PEER_CONFIGS-local,boto3,rclone-full,s3fs-cache}"   # PEER_CONFIGS= runs datahub only
DATAHUB_PY="${DATAHUB_PY:-$REPO/.venv/bin/python}"
LIMITS="--limit-scale ${LIMIT_SCALE:-1.0}"   # <1 shortens every per-pass time limit (capped passes report rates)

if [[ ! -x "$BENCH_VENV/bin/python" ]]; then
  # The harness's setup.sh pip-installs moto/s3fs/boto3 and can backtrack for a long time offline.
  # Same packages, offline: numpy from the package index, the rest (moto, boto3, s3fs, Pillow,
  # torch 2.13.0) from datahub's own venv through a .pth file.
  python3 -m venv "$BENCH_VENV"
  "$BENCH_VENV/bin/pip" install -q numpy
  "$DATAHUB_PY" -c 'import site; print(site.getsitepackages()[0])' \
    >"$("$BENCH_VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')/zz_datahub_venv.pth"
fi
"$PEERS/endpoint.sh" start
if [[ -f "$BENCH_WORK/manifest.json" ]]; then
  "$BENCH_VENV/bin/python" "$PEERS/gen_data.py" --upload-only
else
  "$BENCH_VENV/bin/python" "$PEERS/gen_data.py"   # 5000 JPEGs + 2 x 512 MiB, minutes on 2 cores
fi

# datahub's own state (catalog with the bucket snapshot) lives outside the cache dirs the driver empties:
# a cold pass is a fresh daemon + empty cache + dropped page cache, with the snapshot already recorded.
DH="$BENCH_WORK/datahub"
mkdir -p "$DH"
cat >"$DH/datahub.toml" <<TOML
home = "$DH/home"
[s3]
endpoint_url = "$BENCH_ENDPOINT"
access_key_id = "$AWS_ACCESS_KEY_ID"
secret_access_key = "$AWS_SECRET_ACCESS_KEY"
region = "us-east-1"
path_style = true
TOML
DHCMD="$DATAHUB_PY -m fuse_adapter --config $DH/datahub.toml"

# the first mount of a bucket takes its snapshot (LIST + commit): time it once, separately
mkdir -p "$DH/mnt"
start=$(date +%s.%N)
$DHCMD mount "$DH/mnt" "s3://$BENCH_BUCKET" --refresh --background
until grep -q '"ready"' "$DH/mnt/.datahub"; do sleep 0.1; done
end=$(date +%s.%N)
echo "snapshot of s3://$BENCH_BUCKET: $(echo "$end - $start" | bc) s ($(tr -d ' \n' <"$DH/mnt/.datahub"))" \
  | tee "$BENCH_WORK/snapshot.txt"
$DHCMD umount "$DH/mnt"

OUT="$BENCH_WORK/results/raw.jsonl"
mkdir -p "$(dirname "$OUT")"
cd "$PEERS"
"$BENCH_VENV/bin/python" run_bench.py --name datahub --workloads "$WORKLOADS" --reps "$REPS" $LIMITS --out "$OUT" \
  --manifest "$BENCH_WORK/manifest.json" --endpoint-log "$BENCH_WORK/run/moto.log" \
  --mount "$DHCMD mount {mnt} s3://$BENCH_BUCKET --cache-dir {cache} --foreground" \
  --unmount "$DHCMD umount {mnt}" --cache-dir '{cache}'
[[ -z "$PEER_CONFIGS" ]] || "$BENCH_VENV/bin/python" run_bench.py --configs "$PEER_CONFIGS" --workloads "$WORKLOADS" --reps "$REPS" $LIMITS --out "$OUT" \
  --manifest "$BENCH_WORK/manifest.json" --endpoint-log "$BENCH_WORK/run/moto.log"
"$BENCH_VENV/bin/python" report.py "$OUT" >"$BENCH_WORK/report.md"
echo "report: $BENCH_WORK/report.md"
