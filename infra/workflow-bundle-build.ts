import path from 'node:path';
import { buildWorkflowBundle, defaultWorkflowBundleDir, writeWorkflowBundle } from './workflow-bundle.ts';

/**
 * `npm run build:workflows [-- DIR]`: builds the workflow bundle once and writes it, with its build id and source
 * fingerprint, to DIR (default out/workflow-bundle, where the orchestrator worker looks). Run it in an image build
 * or before a deploy; a worker whose checkout no longer matches the recorded sources builds its own at start.
 */

async function run(): Promise<void> {
  const dir = path.resolve(process.argv[2] ?? defaultWorkflowBundleDir);
  const { code } = await buildWorkflowBundle();
  const manifest = writeWorkflowBundle(dir, code);
  const files = Object.keys(manifest.fileHashes).length;
  console.log(`workflow bundle ${manifest.buildId}: ${dir} (${files} source files, ${code.length} bytes)`);
}

run().catch((err: unknown) => {
  console.error(`build:workflows: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
