// The official OpenAI Node SDK against the proxy: node embeddings.mjs BASE_URL
// Embeds 60 texts, then 100 (the 60 among them), in the SDK's default encoding (base64, decoded
// by the SDK) and then as floats; prints what it got as one JSON object.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "sk-node", maxRetries: 0 });
const texts = Array.from({ length: 100 }, (_, i) => `sentence number ${i} about caches`);
const model = "text-embedding-3-small";

async function embed(input, extra = {}) {
  const { data, response } = await client.embeddings
    .create({ model, input, ...extra })
    .withResponse();
  return {
    cache: response.headers.get("x-deja-cache"),
    inputsCached: response.headers.get("x-deja-inputs-cached"),
    vectors: data.data.map((d) => d.embedding),
    indexes: data.data.map((d) => d.index),
    promptTokens: data.usage.prompt_tokens,
  };
}

const first = await embed(texts.slice(0, 60));
const second = await embed(texts);
const asFloats = await embed(texts, { encoding_format: "float" });
console.log(JSON.stringify({ first, second, asFloats }));
