#!/usr/bin/env bash
# Run this device kit on the present Vulkan device: every program's outputs, the calibration probes' and the
# programs' per-dispatch times (ETDump), then the stock / solver pairs in interleaved rounds (PASSES fresh
# processes each, while they fit in TIME_BUDGET seconds, default 420).
# Results go to results/ beside this file; `bash run.sh ARCHIVE.tgz` also packs them into one file (in 15 MiB
# parts ARCHIVE.tgz.00, .01, ... when larger).
# Bring them back and read them with `layout-solver device-kit read DIR`.
set -u
KIT="$(cd "$(dirname "$0")" && pwd)"
ARCHIVE="${1:-}"
RESULTS="$KIT/results"
. "$KIT/settings.sh"
# The kit carries a Vulkan loader (lib/libvulkan.so.1) for machines that have none.
export LD_LIBRARY_PATH="$KIT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && ! ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json >/dev/null 2>&1; then
  # A driver installed outside the loader's search path (NVIDIA's container toolkit mounts it here).
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
    if [ -f "$icd" ]; then export VK_DRIVER_FILES="$icd"; break; fi
  done
fi
# The driver library the ICD names, where the container mounts it outside the linker's cache.
if [ -d /usr/local/nvidia/lib64 ]; then export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/usr/local/nvidia/lib64"; fi
rm -rf "$RESULTS"
mkdir -p "$RESULTS/outputs" "$RESULTS/times" "$RESULTS/etdump"
# The libraries and each model's programs travel packed (.tar.xz); xz, or Python where xz is missing, unpacks them.
unpack() {
  if command -v xz >/dev/null 2>&1; then tar -xJf "$1" -C "$KIT"
  else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' "$1" "$KIT"
  fi
}
for packed in "$KIT/lib.tar.xz" "$KIT"/bundles/*.tar.xz; do
  if [ -f "$packed" ]; then unpack "$packed" || { echo "cannot unpack $packed" >&2; exit 5; }; fi
done
cp "$KIT/settings.sh" "$RESULTS/settings.sh"  # what this run used (settings.sh may be edited for a quicker run)
RUN=("$KIT/vk_runner" "$KIT/lib/libvkbackend.so")
START=$(date +%s)
say() { echo "[run.sh $(( $(date +%s) - START )) s] $*" | tee -a "$RESULTS/log.txt"; }

if ! "${RUN[@]}" device > "$RESULTS/device.txt" 2>> "$RESULTS/log.txt"; then
  say "no usable Vulkan device: see $RESULTS/log.txt"; exit 4
fi
say "device: $(cat "$RESULTS/device.txt")"

# Outputs: all programs in one process; one that crashed it is then run alone, so the crash names its program.
"${RUN[@]}" outputs "$KIT/programs.tsv" "$RESULTS/outputs" 2>> "$RESULTS/log.txt"
cut -f1 "$KIT/programs.tsv" | while read -r name; do
  if [ ! -f "$RESULTS/outputs/$name.outputs.json" ]; then
    "${RUN[@]}" outputs "$KIT/programs.tsv" "$RESULTS/outputs" "$name" 2>> "$RESULTS/log.txt" ||
      echo "{\"error\": \"the program crashed the runner (exit $?)\"}" > "$RESULTS/outputs/$name.outputs.json"
  fi
done
say "outputs: $(ls "$RESULTS/outputs" | grep -c outputs.json) programs"

# Probes before the pairs: one process whatever PASSES says, and the device profile a second kit needs.
# Every dispatch of each probe program, timed by the runtime's query pool (ETDump).
if [ -s "$KIT/probes.tsv" ]; then
  "${RUN[@]}" profile "$KIT/probes.tsv" "$PROBE_WARMUP" "$PROBE_ROUNDS" "$RESULTS/etdump" 2>> "$RESULTS/log.txt"
  cut -f1 "$KIT/probes.tsv" | while read -r name; do
    if [ ! -f "$RESULTS/etdump/$name.etdp" ] && [ ! -f "$RESULTS/etdump/$name.error" ]; then
      "${RUN[@]}" profile "$KIT/probes.tsv" "$PROBE_WARMUP" "$PROBE_ROUNDS" "$RESULTS/etdump" "$name" \
        2>> "$RESULTS/log.txt" || echo "crashed the runner (exit $?)" > "$RESULTS/etdump/$name.error"
    fi
  done
  say "probes: $(ls "$RESULTS/etdump" | grep -c etdp) profiled"
fi

# The programs' own dispatches under the query pool (ETDump), each program in its own process: `read` weighs
# the probes' dispatch times against the programs' wall times (a fast GPU runs back-to-back dispatches in less
# wall time than their timestamps add up to).
mkdir -p "$RESULTS/programs"
cut -f1 "$KIT/programs.tsv" | while read -r name; do
  "${RUN[@]}" profile "$KIT/programs.tsv" "$PROBE_WARMUP" "$PROBE_ROUNDS" "$RESULTS/programs" "$name" \
    2>> "$RESULTS/log.txt" || echo "crashed the runner (exit $?)" > "$RESULTS/programs/$name.error"
done
say "programs: $(ls "$RESULTS/programs" | grep -c etdp) profiled"

# Pairs: each model's programs in one process, interleaved rounds; PASSES processes per model. A pass is not
# started when the one before says it would end past TIME_BUDGET seconds from the start (a lent device's minutes
# are counted): the first always runs, and `read` takes the passes that ran.
TIME_BUDGET="${TIME_BUDGET:-420}"
last=0
for pass in $(seq 1 "$PASSES"); do
  began=$(date +%s)
  if [ "$pass" -gt 1 ] && [ $(( began - START + last )) -gt "$TIME_BUDGET" ]; then
    say "timing pass $pass of $PASSES not started: it would end past TIME_BUDGET=$TIME_BUDGET s"; break
  fi
  while IFS=$'\t' read -r key names; do
    # shellcheck disable=SC2086 - the names are one word each
    "${RUN[@]}" time "$KIT/programs.tsv" "$WARMUP" "$ROUNDS" "$RESULTS/times/$key.$pass.json" $names \
      2>> "$RESULTS/log.txt" || echo "{\"crash\": \"exit $?\"}" > "$RESULTS/times/$key.$pass.json"
  done < "$KIT/pairs.tsv"
  last=$(( $(date +%s) - began ))
  say "timing pass $pass of $PASSES done ($last s)"
done

say "done"
if [ -n "$ARCHIVE" ]; then
  tar czf "$ARCHIVE" -C "$KIT" results && say "results packed into $ARCHIVE"
  # A transfer that takes files of at most 16 MiB (the device machines here) gets parts: cat ARCHIVE.* | tar xz
  if [ "$(stat -c %s "$ARCHIVE")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15m -d "$ARCHIVE" "$ARCHIVE." && rm "$ARCHIVE" && say "split into $(ls "$ARCHIVE".* | wc -l) parts"
  fi
fi
