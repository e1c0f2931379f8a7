// The README's Node example, run by .ci/run against `llmgate serve --demo`
// (LLMGATE_BASE_URL and LLMGATE_API_KEY come from the demo's banner).
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.LLMGATE_BASE_URL, apiKey: process.env.LLMGATE_API_KEY });
const r = await client.chat.completions.create({ model: "qwen2.5-32b-instruct", messages: [{ role: "user", content: "Hello!" }] });
console.log(r.choices[0].message.content, r.usage);
if (!r.choices[0].message.content || !r.usage || r.usage.completion_tokens <= 0) {
  throw new Error("the README example got no answer or no usage");
}
