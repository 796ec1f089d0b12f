/**
 * Secrets that can hide inside free text (an error message, a stack, a log line): passwords in URLs
 * (`scheme://user:password@host`, the password may hold `/`, `#` or `@`), bearer and Basic credentials, and
 * settings whose name ends in password / passwd / pwd / api key / token / secret / authorization, written as
 * `NAME=value`, `name: value` or JSON `"name": "value"` (so `PGPASSWORD=`, `TBT_AGENT_DB_PASSWORD=`,
 * `"apiKey"`, `x-api-key:` too). Replaced, never printed, so a crash log or a report never carries them.
 */

export const REDACTED = '[redacted]';

// Up to the last `@` before a space or quote: an unescaped `/`, `#` or `@` in a password is still the password.
// Runs are bounded so that a long line costs linear time, not quadratic.
const urlPassword = /([a-z][a-z0-9+.-]{0,30}:\/\/[^\s/:@'"]{0,256}):[^\s'"]{0,1024}@/gi;
const bearer = /\b(bearer\s+)(?!\[redacted\])[A-Za-z0-9._~+/=-]+/gi;
const secretName = String.raw`[A-Za-z0-9_-]{0,64}(?:password|passwd|pwd|api[_-]?key|token|secret|authorization)`;
// NAME=value, name: value, "name": "value"; an Authorization value keeps its scheme word (Basic, Bearer).
const scheme = String.raw`(?:bearer|basic|digest)\s+`;
const notDone = String.raw`(?!\[redacted\]|${scheme}\[redacted\])`;
const setting = new RegExp(
  String.raw`\b(${secretName}(["']?)\s*[=:]\s*)${notDone}(?:(["'])(${scheme})?(?:\\.|(?!\3).){0,1024}\3` +
    String.raw`|(${scheme})?[^\s,;&'"}\]]+)`,
  'gi',
);

export function redactSecretsInText(text: string): string {
  return text
    .replace(urlPassword, `$1:${REDACTED}@`)
    .replace(setting, (_all, head: string, _q: string, quote?: string, quotedScheme?: string, word?: string) =>
      quote ? `${head}${quote}${quotedScheme ?? ''}${REDACTED}${quote}` : `${head}${word ?? ''}${REDACTED}`,
    )
    .replace(bearer, `$1${REDACTED}`);
}
