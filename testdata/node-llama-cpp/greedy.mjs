// Greedy continuations from llama.cpp (the prebuilt CPU binaries that
// node-llama-cpp ships on npm), for the real-model fidelity table: an engine
// nobody here wrote. Reads {"model", "n", "threads", "prompts": [[ids]...]}
// as JSON on stdin and writes {"engine", "continuations": [[ids]...]} on
// stdout. Token ids in, token ids out: no tokenizer or chat template of
// llama.cpp is involved, so every engine sees the same ids. Each prompt runs
// in a fresh sequence state; sampling is greedy (temperature 0), with no
// repetition penalty, and end-of-generation tokens do not stop it (the other
// engines do not stop either).
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const req = JSON.parse(Buffer.concat(chunks).toString("utf8"));
if (typeof req.model !== "string" || !Number.isInteger(req.n) || req.n < 1 || !Array.isArray(req.prompts)) {
	throw new Error('stdin must be {"model": PATH, "n": N>=1, "threads": T, "prompts": [[ids]...]}');
}

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: req.model, gpuLayers: 0, useMmap: true });
const longest = Math.max(...req.prompts.map((p) => p.length));
const context = await model.createContext({
	contextSize: longest + req.n + 8,
	batchSize: Math.min(512, longest),
	threads: req.threads ?? 2,
	sequences: 1,
	flashAttention: false,
});
const sequence = context.getSequence();
const continuations = [];
for (const prompt of req.prompts) {
	await sequence.clearHistory();
	const out = [];
	for await (const token of sequence.evaluate(prompt, { temperature: 0, repeatPenalty: false })) {
		out.push(token);
		if (out.length === req.n) break;
	}
	continuations.push(out);
}
const info = { llamaCpp: llama.llamaCppRelease, buildType: llama.buildType, gpu: llama.gpu, cpuMathCores: llama.cpuMathCores };
process.stdout.write(JSON.stringify({ engine: "llama.cpp", info, continuations }) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
