// The target engine of the real-τ dataset when `scripts/realtau gen --engine
// llama.cpp`: llama.cpp from the prebuilt CPU binaries node-llama-cpp ships on
// npm (testdata/node-llama-cpp/package.json, shared with the fidelity table; nothing is built from source).
// Reads {"model", "n", "threads", "sequences", "eos": [ids], "prompts": [[ids]...]}
// as JSON on stdin and writes {"engine", "info", "continuations": [[ids]...]}
// on stdout. Token ids in, token ids out: no tokenizer or chat template of
// llama.cpp is involved. Greedy (temperature 0, no repetition penalty); a
// continuation stops after n tokens or after the first end token in eos
// (which it then ends with). Up to `sequences` prompts run at once, each in
// its own sequence of one context, so llama.cpp batches their decode steps.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const req = JSON.parse(Buffer.concat(chunks).toString("utf8"));
if (typeof req.model !== "string" || !Number.isInteger(req.n) || req.n < 1 || !Array.isArray(req.prompts) || req.prompts.length === 0) {
	throw new Error('stdin must be {"model": PATH, "n": N>=1, "threads": T, "sequences": S, "eos": [ids], "prompts": [[ids]...]}');
}
const eos = new Set(req.eos ?? []);
const nseq = Math.max(1, Math.min(req.sequences ?? 1, req.prompts.length));

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: req.model, gpuLayers: 0, useMmap: true });
const longest = Math.max(...req.prompts.map((p) => p.length));
const context = await model.createContext({
	contextSize: nseq * (longest + req.n + 8),
	batchSize: Math.min(512, nseq * longest),
	threads: req.threads ?? 2,
	sequences: nseq,
	flashAttention: false,
});
const continuations = new Array(req.prompts.length);
let next = 0;
async function worker() {
	const sequence = context.getSequence();
	for (;;) {
		const i = next++;
		if (i >= req.prompts.length) break;
		await sequence.clearHistory();
		const out = [];
		for await (const token of sequence.evaluate(req.prompts[i], { temperature: 0, repeatPenalty: false })) {
			out.push(token);
			if (out.length === req.n || eos.has(token)) break;
		}
		continuations[i] = out;
		process.stderr.write(`batch.mjs: prompt ${i + 1}/${req.prompts.length} done\n`);
	}
	sequence.dispose();
}
await Promise.all(Array.from({ length: nseq }, worker));
const info = { llamaCpp: llama.llamaCppRelease, buildType: llama.buildType, gpu: llama.gpu, cpuMathCores: llama.cpuMathCores, sequences: nseq };
process.stdout.write(JSON.stringify({ engine: "llama.cpp", info, continuations }) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
