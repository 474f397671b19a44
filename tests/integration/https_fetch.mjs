// A fetch() over node:https that trusts a given CA: the integration tests'
// HTTPS client for a daemon with a self-signed certificate (Node 20's global
// fetch takes no CA option without the undici package). Passed to the
// `openai` client through its documented `fetch` option, and used by the
// harness for the readiness probe.
import https from 'node:https';
import { Readable } from 'node:stream';

/**
 * Returns fetch(url, init) → Promise<Response> for https URLs, verifying the
 * server against `ca` and presenting `cert` + `key` when given (PEM texts).
 * Supports what the tests and the openai client use: method, headers (object
 * or Headers), a string or bytes body, signal; the response body streams (SSE).
 */
export function httpsFetch({ ca, cert, key }) {
  const agent = new https.Agent({ ca, cert, key });
  return (input, init = {}) =>
    new Promise((resolve, reject) => {
      const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
      const headers = Object.fromEntries(new Headers(init.headers ?? {}));
      const method = init.method ?? 'GET';
      const req = https.request(url, { method, headers, agent, signal: init.signal }, (res) => {
        const out = new Headers();
        for (const [name, value] of Object.entries(res.headers)) {
          for (const v of Array.isArray(value) ? value : [value]) if (v !== undefined) out.append(name, v);
        }
        // As fetch does: aborting mid-body fails the body with an AbortError
        // (the socket's own error would be a reset).
        init.signal?.addEventListener('abort', () => res.destroy(init.signal.reason ?? new DOMException('aborted', 'AbortError')), { once: true });
        const noBody = method === 'HEAD' || res.statusCode === 204 || res.statusCode === 304;
        if (noBody) res.resume();
        resolve(new Response(noBody ? null : Readable.toWeb(res), { status: res.statusCode, statusText: res.statusMessage, headers: out }));
      });
      req.on('error', reject);
      if (init.body === undefined || init.body === null) {
        req.end();
      } else {
        req.end(typeof init.body === 'string' || init.body instanceof Uint8Array ? init.body : String(init.body));
      }
    });
}
