#!/usr/bin/env bash
# Records raw streamed answers of an OpenAI-compatible server as fixtures for kvbench's stream
# parser. The bytes are written exactly as they arrive (curl -N, no decoding), so line endings,
# comments and chunking are the server's own.
#
#   capture.sh URL MODEL PREFIX          e.g. capture.sh http://127.0.0.1:8000 meta-llama/Llama-3.1-8B-Instruct vllm
#
# writes PREFIX-completions.sse, PREFIX-chat.sse and (for vLLM) PREFIX-chat-tokenids.sse here.
# The API key, if the server needs one, is read from $OPENAI_API_KEY and is not written anywhere.
# Prompts are fixed and short; check the files for anything you would not commit before adding them.
set -euo pipefail
url=${1:?usage: capture.sh URL MODEL PREFIX}
model=${2:?usage: capture.sh URL MODEL PREFIX}
prefix=${3:?usage: capture.sh URL MODEL PREFIX}
dir=$(cd "$(dirname "$0")" && pwd)
auth=()
if [[ -n ${OPENAI_API_KEY:-} ]]; then
	auth=(-H "Authorization: Bearer $OPENAI_API_KEY")
fi
post() { # path body outfile
	curl -sS -N --fail-with-body --max-time 120 "${auth[@]}" -H 'Content-Type: application/json' \
		-d "$2" "${url%/}$1" >"$dir/$3"
	echo "wrote $3 ($(wc -c <"$dir/$3") bytes)"
}
post /v1/completions "{\"model\":\"$model\",\"prompt\":\"The capital of France is\",\"max_tokens\":5,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" "$prefix-completions.sse"
post /v1/chat/completions "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"Say hello.\"}],\"max_completion_tokens\":16,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" "$prefix-chat.sse"
if [[ $prefix == vllm* ]]; then
	# vLLM only: token ids per chunk and usage on every chunk.
	post /v1/chat/completions "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"What is 2+2?\"}],\"max_completion_tokens\":64,\"stream\":true,\"return_token_ids\":true,\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true}}" "$prefix-chat-tokenids.sse"
fi
