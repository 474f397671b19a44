// Shared request sets for the concurrency, preemption and abort tests: many
// different prompts and lengths, and a helper that streams one completion.

const SUBJECTS = ['Once upon a time', 'The little dog', 'Lily and Tom', 'One day, a bird', 'The big red ball', 'A small cat',
  'The sun was', 'Mom said'];
const VERBS = ['', ' went to the park', ' was very happy', ' saw a tree', ' wanted to play', ' found a box', ' looked at the sky',
  ' had a friend'];

/** `count` distinct prompts with distinct max_tokens in [minTokens, maxTokens]. */
export function workload(count, { minTokens = 8, maxTokens = 120 } = {}) {
  const span = maxTokens - minTokens + 1;
  return Array.from({ length: count }, (_, i) => ({
    prompt: SUBJECTS[i % SUBJECTS.length] + VERBS[Math.floor(i / SUBJECTS.length) % VERBS.length],
    max_tokens: minTokens + ((i * 37) % span),
  }));
}

/**
 * Streams one greedy completion with the openai client and returns
 * { text, finish, chunks }.
 */
export async function streamGreedy(client, model, req, extra = {}) {
  const stream = await client.completions.create({ model, temperature: 0, stream: true, ...req, ...extra });
  let text = '';
  let finish;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, chunks };
}
