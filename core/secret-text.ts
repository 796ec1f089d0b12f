/**
 * Secrets that can hide inside free text (an error message, a stack, a log line): passwords in URLs
 * (`scheme://user:password@host`), bearer tokens and `password=` / `api_key=` settings. Replaced, never
 * printed, so a crash log or a report never carries them.
 */

export const REDACTED = '[redacted]';

const urlPassword = /([a-z][a-z0-9+.-]*:\/\/[^\s/:@'"]*):[^\s@'"/]*@/gi;
const bearer = /\b(bearer\s+)[A-Za-z0-9._~+/=-]+/gi;
const setting = /\b((?:password|passwd|pwd|api[_-]?key|token|secret)\s*[=:]\s*)(?!\[redacted\])[^\s,;&'"]+/gi;

export function redactSecretsInText(text: string): string {
  return text
    .replace(urlPassword, `$1:${REDACTED}@`)
    .replace(bearer, `$1${REDACTED}`)
    .replace(setting, `$1${REDACTED}`);
}
