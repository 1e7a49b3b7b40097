#!/usr/bin/env bash
# How many pairs of places the hand-written product code repeats (issue 15's measure): runs the
# tool library's `duplicates` command over broker/ kraft/ metadata_log/ spark_source/,
# kafka_protocol/*.py and the client core kafka_protocol/client/, leaving out the generated
# codecs (kafka_protocol/messages, metadata, coordinator).  Extra arguments go to `duplicates`
# (e.g. --most 200 to list every pair).  Needs `duplicates` on the PATH; not part of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v duplicates >/dev/null || { echo "duplicates: not on the PATH" >&2; exit 1; }
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
for package in broker kraft metadata_log spark_source; do
  mkdir -p "$tree/$package" && cp -r "$package/." "$tree/$package/"
done
mkdir -p "$tree/kafka_protocol"
cp kafka_protocol/*.py "$tree/kafka_protocol/"
cp -r kafka_protocol/client "$tree/kafka_protocol/"
find "$tree" -name __pycache__ -prune -exec rm -rf {} +
duplicates --repo "$tree" --seconds 120 "$@" | sed "s#$tree/##g"
