// The official Node SDK's responses API against a Deja proxy: miss then hit, plain, streamed
// (stream: true) and through the responses.stream helper, and a chain continued from a hit.
// Usage: NODE_PATH=<dir holding openai> node responses_sdk.cjs BASE_URL; prints one JSON object.
const OpenAI = require("openai");

// The text of a response's messages (a streamed event's response has no output_text helper).
function textOf(response) {
  return response.output
    .filter((item) => item.type === "message")
    .flatMap((item) => item.content)
    .filter((part) => part.type === "output_text")
    .map((part) => part.text)
    .join("");
}

async function main() {
  const client = new OpenAI({ baseURL: process.argv[2], apiKey: "sk-node", maxRetries: 0 });
  const out = { plain: [], streamed: [], helper: [] };
  for (let i = 0; i < 2; i++) {
    const { data, response } = await client.responses
      .create({ model: "m", input: "Node plain question" })
      .withResponse();
    out.plain.push({ id: data.id, text: data.output_text, cache: response.headers.get("x-deja-cache") });
  }
  for (let i = 0; i < 2; i++) {
    const { data: stream, response } = await client.responses
      .create({ model: "m", input: "Node streamed question", stream: true })
      .withResponse();
    const types = [];
    const numbers = [];
    let text = "";
    let final = null;
    for await (const event of stream) {
      types.push(event.type);
      numbers.push(event.sequence_number);
      if (event.type === "response.output_text.delta") text += event.delta;
      if (event.type === "response.completed") final = event.response;
    }
    out.streamed.push({
      cache: response.headers.get("x-deja-cache"),
      types, numbers, text, id: final.id, final_text: textOf(final),
    });
  }
  for (let i = 0; i < 2; i++) {
    const stream = client.responses.stream({ model: "m", input: "Node helper question" });
    let text = "";
    stream.on("response.output_text.delta", (event) => { text += event.delta; });
    const final = await stream.finalResponse();
    out.helper.push({ text, id: final.id, final_text: final.output_text });
  }
  const next = await client.responses.create({
    model: "m", input: "Node follow-up", previous_response_id: out.plain[1].id,
  });
  out.chain = { text: next.output_text, previous: next.previous_response_id };
  const fetched = await client.responses.retrieve(out.helper[1].id);
  out.retrieved = fetched.output_text;
  console.log(JSON.stringify(out));
}

main().catch((error) => { console.error(error); process.exit(1); });
