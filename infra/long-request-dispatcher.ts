import { Agent } from 'undici';

/**
 * An HTTP dispatcher without undici's own 300 s header and body timeouts, for requests whose answer legitimately
 * takes longer: a learner's training step (hours at reference size), a weight load into a policy server, one
 * non-streamed generation of thousands of tokens. Node's fetch would otherwise fail them with a bare "fetch
 * failed" after 5 minutes whatever the caller's own timeout; every caller bounds its request with an
 * AbortSignal instead.
 */
export const longRequestDispatcher = new Agent({ headersTimeout: 0, bodyTimeout: 0 });
